"""FlowRL next to GRPO and IPS on the tabular toys (issue 8), with FlowRL's predicted large-group fixed points.

Writes benchmarks/results/toy_flowrl.json (every number per seed) and benchmarks/results/toy_flowrl.md (the
BENCHMARKS.md fragment). Run: `.venv/bin/python benchmarks/toy/toy_flowrl.py`. Seeds 42, 142, 242, 342, 442 and the
`divrl toy` defaults of each environment (as benchmarks/toy/toy_reproduction.py); FlowRL at its published beta_r = 15
and at betas below the environment's beta_max, where an interior fixed point exists (`divrl.toy.fixed_points`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from toy_reproduction import SEEDS, config, count_range, final, machine, pm, rounded, span

from divrl.core import FLOWRL_BETA
from divrl.toy.envs import TabularEnv, make_bandit, make_hypergrid, make_multiplicity_grid
from divrl.toy.fixed_points import closest_interior_fixed_point, flowrl_fixed_points, reference_distribution
from divrl.toy.runner import train

BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"
COVERED_MASS = 0.01  # an outcome group (arm, A / B, hyper-grid mode) counts as covered with final mass >= 0.01
CONCENTRATED = 0.9  # "steps to concentrate": first step whose likeliest outcome holds >= 0.9
# (label, env factory, `divrl toy` env name, FlowRL betas): published beta plus betas below each env's beta_max.
SETTINGS = (
    ("bandit r = (1, 2, 3, 4)", lambda: make_bandit([1, 2, 3, 4]), "bandit", (0.25, 0.5, 0.75, 1.0, FLOWRL_BETA)),
    ("multiplicity grid", make_multiplicity_grid, "multiplicity", (0.05, FLOWRL_BETA)),
    ("hyper-grid D=2 H=8 R0=0.1", lambda: make_hypergrid(dim=2, side=8, r0=0.1), "hypergrid",
     (0.25, 0.5, FLOWRL_BETA)),
)


def groups(env: TabularEnv, dist: np.ndarray) -> np.ndarray:
    """Outcome distribution(s) (..., O) -> the reported groups' masses (..., k)."""
    return env.outcome_freqs(torch.as_tensor(dist, dtype=torch.float64)).numpy()


def prediction(env: TabularEnv, beta: float) -> dict[str, Any]:
    """FlowRL's predicted end point: its first interior fixed point, or the concentration limit above beta_max."""
    fixed = flowrl_fixed_points(env, beta)
    kind = "fixed point" if fixed.points else "concentration limit"
    dist = fixed.points[0] if fixed.points else fixed.concentration_limit
    l1 = float(np.abs(dist - env.target.numpy()).sum())
    return {"beta_max": round(fixed.beta_max, 4), "kind": kind, "dist": dist, "groups": rounded(groups(env, dist)),
            "l1_to_target": round(l1, 4)}


def best_interior(env: TabularEnv) -> dict[str, float]:
    """The interior fixed point closest to the target over all betas in (0, beta_max]: the best any beta can do."""
    beta, dist = closest_interior_fixed_point(env)
    return {"beta": round(beta, 4), "l1_to_target": round(float(np.abs(dist - env.target.numpy()).sum()), 4)}


def setting(env: TabularEnv, env_name: str, betas: tuple[float, ...]) -> dict[str, Any]:
    """GRPO, IPS and FlowRL at each beta over SEEDS; per-seed final metrics and FlowRL's predictions."""
    methods = [("grpo", "grpo", {}), ("ips", "ips", {})]
    methods += [(f"flowrl beta={b:g}", "flowrl", {"flowrl_beta": b}) for b in betas]
    rows: dict[str, Any] = {}
    for label, method, overrides in methods:
        start = time.perf_counter()
        run = train(env, method, config(env_name, **overrides), SEEDS)
        masses = final(run, "outcome_freqs")
        assert run.final_distribution is not None
        concentrated = run.curves["max_outcome_prob"] >= CONCENTRATED
        thirds = [run.curves["outcome_freqs"].shape[1] * k // 3 - 1 for k in (1, 2, 3)]
        row: dict[str, Any] = {
            "l1": rounded(final(run, "l1_to_target")), "max_prob": rounded(final(run, "max_outcome_prob")),
            "distinct_sampled": rounded(final(run, "distinct_outcomes")), "groups": rounded(masses),
            "covered": (masses >= COVERED_MASS).sum(1).tolist(),
            "top_outcome": [env.outcome_labels[i] for i in run.final_distribution.argmax(1)],
            "top_outcome_reward": rounded(env.outcome_rewards[run.final_distribution.argmax(1)].numpy()),
            "steps_to_concentrate": [int(c.argmax()) + 1 if c.any() else None for c in concentrated],
            "groups_at_thirds": {str(t + 1): rounded(run.curves["outcome_freqs"][:, t].mean(0)) for t in thirds},
            "seconds": round(time.perf_counter() - start, 1),
        }
        if method == "flowrl":
            predicted = prediction(env, overrides["flowrl_beta"])
            row["l1_to_prediction"] = rounded(np.abs(run.final_distribution - predicted.pop("dist")).sum(1))
            row["prediction"] = predicted
        rows[label] = row
        print(f"  {label}: L1 {pm(np.array(row['l1']))}, covered {row['covered']} ({row['seconds']}s)", flush=True)
    return {"rows": rows, "best_interior": best_interior(env), "max_reward": float(env.outcome_rewards.max()),
            "reference_groups": rounded(groups(env, reference_distribution(env))),
            "target_groups": rounded(groups(env, env.target.numpy())), "group_labels": env.freq_labels}


def markdown(results: dict[str, Any]) -> str:
    """The BENCHMARKS.md fragment."""
    m = results["machine"]
    lines = ["## Toy FlowRL vs GRPO and IPS (issue 8)", "",
             f"`benchmarks/toy/toy_flowrl.py`, {m['date']}, {m['nproc']} cores ({m['cpu']}), torch on 1 thread per "
             f"run, {results['total_wall_seconds']} s wall in all (shared machine, load average "
             f"{m['load_average_1_5_15']}). "
             "Seeds 42, 142, 242, 342, 442; mean ± sample std over seeds of each seed's mean over the last 10 steps; "
             "`divrl toy` defaults (bandit: Adam lr 0.02, G 64, 1000 steps; grids: Adam lr 0.05, G 32, entropy "
             "bonus 0.001, 3000 / 2000 steps). FlowRL: `divrl toy --methods flowrl --flowrl-beta B`, log Z one "
             "learned scalar, reference = the initial policy, r_hat = the group-normalised reward. 'covered' = "
             f"outcome groups (arms, A / B, modes) with final mass >= {COVERED_MASS} per seed. 'predicted' = FlowRL's "
             "large-group fixed point (`divrl.toy.fixed_points`): the interior one when beta <= beta_max, else "
             "the concentration limit (the best outcomes, weighted pi_ref(o) exp(-L(o) c)).", ""]
    for label, section in results["settings"].items():
        names = section["group_labels"]
        lines += [f"### {label}", "",
                  f"Groups: {', '.join(names)}; target {tuple(section['target_groups'])}, initial policy "
                  f"{tuple(section['reference_groups'])}.", "",
                  "| method | L1 to target | max outcome prob | covered (per seed) | group masses (mean) | "
                  "predicted groups (L1 to target) | L1 to predicted |", "|---|---|---|---|---|---|---|"]
        for name, row in section["rows"].items():
            masses = tuple(round(float(x), 3) for x in np.mean(row["groups"], 0))
            if "prediction" in row:
                p = row["prediction"]
                predicted = f"{p['kind']} {tuple(round(x, 3) for x in p['groups'])} ({p['l1_to_target']:.3f})"
                to_predicted = span(np.array(row["l1_to_prediction"]))
            else:
                predicted = to_predicted = "-"
            lines.append(f"| {name} | {pm(np.array(row['l1']))} | {pm(np.array(row['max_prob']))} | "
                         f"{row['covered']} of {len(names)} | {masses} | {predicted} | {to_predicted} |")
        beta_max = next(r["prediction"]["beta_max"] for r in section["rows"].values() if "prediction" in r)
        best = section["best_interior"]
        lines += ["", f"beta_max (largest beta with an interior fixed point) = {beta_max:.3f}; over all betas below "
                  f"it the fixed point closest to the target is at beta {best['beta']:.3f}, L1 "
                  f"{best['l1_to_target']:.3f}.", ""]
    lines += ["### Notes", ""] + [f"- {note}" for note in notes(results)] + [""]
    return "\n".join(lines)


def notes(results: dict[str, Any]) -> list[str]:
    """What the tables show and why, with numbers taken from `results`."""
    sections = [results["settings"][label] for label, *_ in SETTINGS]
    bandit, multi, grid = (section["rows"] for section in sections)
    published = f"flowrl beta={FLOWRL_BETA:g}"
    beta_max = [next(r["prediction"]["beta_max"] for r in rows.values() if "prediction" in r)
                for rows in (bandit, multi, grid)]
    best = sections[0]["best_interior"]
    b_share = {step: b / (a + b) for step, (a, b) in multi[published]["groups_at_thirds"].items()}
    grid_top = sorted(set(zip(grid[published]["top_outcome"], grid[published]["top_outcome_reward"])))
    grid_low = grid["flowrl beta=0.5"]

    def steps(row: dict[str, Any]) -> str:
        return count_range([s for s in row["steps_to_concentrate"] if s is not None])

    def covering(rows: dict[str, Any]) -> str:
        """The FlowRL betas whose runs kept every outcome group in every seed."""
        full = [name.split("=")[1] for name, row in rows.items()
                if "prediction" in row and min(row["covered"]) == len(row["groups"][0])]
        return ", ".join(full) or "none"

    return [
        "FlowRL does not target p ∝ r. Its trajectory-balance residual is zero when pi(y) = pi_ref(y) "
        "exp(L(y) (beta r_hat(y) - log Z)), and with group normalisation r_hat = (r - mu_pi) / sigma_pi depends on "
        "pi itself. On these toys an episode's length L is fixed by its outcome, so the candidates form one family "
        "pi_t(o) ∝ pi_ref(o) exp(L(o) (t r(o) - c_t)), and pi_t is a fixed point when t sigma(pi_t) = beta. That "
        "function rises from 0 and falls back to 0 as pi_t concentrates, so it has a maximum beta_max; above it "
        "there is no interior fixed point and FlowRL concentrates on the highest-reward outcomes.",
        f"FlowRL's published beta_r = {FLOWRL_BETA:g} is far above beta_max on every toy ({beta_max[0]:.3f}, "
        f"{beta_max[1]:.3f}, {beta_max[2]:.3f}), so at that value FlowRL collapses like GRPO: max outcome prob "
        f"{pm(np.array(bandit[published]['max_prob']))} on the bandit and {pm(np.array(grid[published]['max_prob']))} "
        "on the hyper-grid. The published value was set for LLM rewards, where the correct answers form a large "
        "set whose members share one r_hat, and the matching keeps pi_ref's spread inside that set.",
        "Below beta_max FlowRL lands on its own predicted fixed point (bandit beta 0.5: L1 to predicted "
        f"{span(np.array(bandit['flowrl beta=0.5']['l1_to_prediction']))}), which is not the reward-proportional "
        f"target: the best any beta can reach on the bandit is L1 {best['l1_to_target']:.3f} (beta "
        f"{best['beta']:.2f}), against group-frequency IPS's measured {pm(np.array(bandit['ips']['l1']))}, because an "
        "exp(t r) tilt cannot equal r / sum r. Betas that kept every outcome group in every seed: bandit "
        f"{covering(bandit)}; multiplicity grid {covering(multi)}; hyper-grid {covering(grid)}. Anything above "
        "beta_max collapses (bandit beta 1: max outcome prob "
        f"{pm(np.array(bandit['flowrl beta=1']['max_prob']))}).",
        "Multiplicity grid: A and B pay the same and both take 7 steps, so every FlowRL fixed point keeps pi_ref's "
        "35 : 7 path ratio, B share 1/6 (GRPO drives B to 0, IPS to 1/2); beta 0.05 sits on it. At beta 15 FlowRL "
        "first concentrates on A, then B's share creeps back once the group rewards are all equal (r_hat = 0 "
        "leaves only the pi / pi_ref matching): mean B share "
        + " / ".join(f"{v:.3f}" for v in b_share.values()) + f" at steps {' / '.join(b_share)}, per-seed final B "
        f"{span(np.array(multi[published]['groups'])[:, 1])}, still below 1/6.",
        f"Hyper-grid, the seed's claim that FlowRL concentrates on one mode: at beta 15 we see it in every seed, "
        f"max outcome prob >= {CONCENTRATED} on cell "
        + ", ".join(f"{cell}, reward {reward:g}" for cell, reward in grid_top)
        + f" (the grid's best: {sections[2]['max_reward']:g}), after {steps(grid[published])} steps (GRPO: "
        f"{steps(grid['grpo'])}). The initial policy puts {sections[2]['reference_groups'][0]:.2f} on mode 0 and at "
        f"most {max(sections[2]['reference_groups'][1:]):.4f} on each other mode. FlowRL's concentration "
        "limit would keep all four best cells (the length factor exp(-L c) even favours the far corner), but "
        "on-policy trajectory balance only corrects trajectories it samples: once the policy has concentrated, "
        "the other modes are never sampled and nothing pulls mass back to them. Below beta_max the interior fixed "
        f"point covers all four modes and training reaches its neighbourhood (beta 0.5: covered "
        f"{grid_low['covered']}, L1 to predicted {span(np.array(grid_low['l1_to_prediction']))}), still far from "
        "p ∝ R: the reference's preference for short episodes stays in the fixed point.",
    ]


def main() -> None:
    start = time.perf_counter()
    results: dict[str, Any] = {"settings": {}}
    for label, make_env, env_name, betas in SETTINGS:
        print(label, flush=True)
        results["settings"][label] = setting(make_env(), env_name, betas)
    results["machine"] = machine()
    results["total_wall_seconds"] = round(time.perf_counter() - start, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "toy_flowrl.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (RESULTS / "toy_flowrl.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
