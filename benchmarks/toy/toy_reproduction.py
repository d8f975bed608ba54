"""Reproduce the toy claims of the execution-rewards and IPS papers (issue 2, "What it must show") with `divrl.toy`.

Writes benchmarks/results/toy.json (every number, per seed, and each claim's pass/fail) and
benchmarks/results/toy.md (the BENCHMARKS.md fragment). Run: `.venv/bin/python benchmarks/toy/toy_reproduction.py`.
All runs use seeds 42, 142, 242, 342, 442 and the `divrl toy` defaults of each environment unless a
section says otherwise.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from divrl.toy.envs import IdeaEnv, TabularEnv, make_bandit, make_hypergrid, make_multiplicity_grid
from divrl.toy.options import ENV_DEFAULTS
from divrl.toy.runner import MethodRun, TrainConfig, train

SEEDS = [42, 142, 242, 342, 442]
BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"
IDEA_METHODS = ["grpo", "qd", "maxent", "pop", "ips", "pop+ips+qd"]
# The execution-rewards paper, Table 1 (last 10 epochs): mean R, max R, diversity, complexity. IPS and pop+ips+qd are
# ours.
SEED_IDEAS = {
    "grpo": (0.0716, 0.8412, 0.9675, 3.4332),
    "qd": (0.0814, 0.8122, 0.9433, 3.4306),
    "maxent": (0.0082, 0.4420, 0.9944, 28.861),
    "pop": (0.0865, 0.9588, 0.9969, 3.7482),
}
EPSILONS = [1e-3, 0.05, 0.1, 0.2]
GROUP_SIZES = [4, 8, 16, 32, 64]


def config(env: str, **overrides: Any) -> TrainConfig:
    """The CLI's defaults for `env` with `overrides`."""
    return TrainConfig(**{**ENV_DEFAULTS[env], **overrides})


def final(run: MethodRun, metric: str) -> np.ndarray:
    """Per-seed mean over the last 10 steps: (seeds,) or (seeds, k)."""
    return run.curves[metric][:, -10:].mean(axis=1)


def pm(values: np.ndarray, digits: int = 3) -> str:
    """'mean ± std' over seeds (sample std)."""
    return f"{values.mean():.{digits}f} ± {values.std(ddof=1):.{digits}f}"


def span(values: np.ndarray, digits: int = 3) -> str:
    """'min-max' over seeds."""
    return f"{values.min():.{digits}f}-{values.max():.{digits}f}"


def count_range(values: list[int]) -> str:
    """'a' or 'a-b' for the smallest and largest of integer counts."""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def rounded(values: np.ndarray) -> list:
    return np.round(values, 4).tolist()


def bandit_main() -> dict[str, Any]:
    """Rewards (1, 2, 3, 4): GRPO collapses; IPS (exact and group-frequency at G = 64) reaches p = r / sum r."""
    env = make_bandit([1, 2, 3, 4])
    runs = {
        "grpo": train(env, "grpo", config("bandit"), SEEDS),
        "ips (group frequency)": train(env, "ips", config("bandit"), SEEDS),
        "ips (exact p)": train(env, "ips", config("bandit", ips_exact=True), SEEDS),
    }
    rows = {name: {"l1": rounded(final(r, "l1_to_target")), "max_prob": rounded(final(r, "max_outcome_prob")),
                   "freqs": rounded(final(r, "outcome_freqs").mean(0))} for name, r in runs.items()}
    claims = {
        "grpo puts >= 0.9 on one arm": bool((final(runs["grpo"], "max_outcome_prob") >= 0.9).all()),
        "ips exact L1 <= 0.03": bool((final(runs["ips (exact p)"], "l1_to_target") <= 0.03).all()),
        "ips group-frequency (G=64) L1 <= 0.06": bool(
            (final(runs["ips (group frequency)"], "l1_to_target") <= 0.06).all()),
    }
    return {"rows": rows, "claims": claims}


def bandit_ablation() -> dict[str, Any]:
    """Group size G x epsilon for group-frequency IPS (as the IPS paper's Table 4), with the exact form beside."""
    env = make_bandit([1, 2, 3, 4])
    table: dict[str, dict[str, Any]] = {}
    for g in GROUP_SIZES:
        row = {}
        for eps in EPSILONS:
            run = train(env, "ips", config("bandit", group_size=g, ips_epsilon=eps), SEEDS)
            row[f"eps={eps:g}"] = {"l1": rounded(final(run, "l1_to_target")),
                                   "p_arm1": rounded(final(run, "outcome_freqs")[:, 0])}
        run = train(env, "ips", config("bandit", group_size=g, ips_exact=True), SEEDS)
        row["exact"] = {"l1": rounded(final(run, "l1_to_target")), "p_arm1": rounded(final(run, "outcome_freqs")[:, 0])}
        table[f"G={g}"] = row
    return {"table": table}


def bandit_equal() -> dict[str, Any]:
    """r = (1, 1, 0, 0), arm 1 initially likelier (logit 0.3): who wins between the two good arms."""
    env = make_bandit([1, 1, 0, 0], [0.3, 0.0, 0.0, 0.0])
    settings = {
        "sgd lr 0.1": config("bandit", group_size=16, steps=2000, optimizer="sgd", lr=0.1),
        "adam lr 0.02": config("bandit", group_size=16, steps=2000, optimizer="adam", lr=0.02),
    }
    out: dict[str, Any] = {}
    for label, cfg in settings.items():
        for method in ("grpo", "ips"):
            freqs = train(env, method, cfg, SEEDS).curves["outcome_freqs"]  # (seeds, steps, arms)
            share = freqs[..., 0] / (freqs[..., 0] + freqs[..., 1])
            out[f"{method}, {label}"] = {
                "p_arm1_at_500_1000_2000": rounded(freqs[:, [499, 999, 1999], 0].T),
                "arm1_share_of_good_final": rounded(share[:, -10:].mean(1)),
            }
    grpo = np.array(out["grpo, sgd lr 0.1"]["p_arm1_at_500_1000_2000"])
    ips_share = np.array(out["ips, sgd lr 0.1"]["arm1_share_of_good_final"])
    claims = {
        "equal rewards, SGD only (not with Adam, see notes): grpo >= 0.7 on arm 1 and rising": bool(
            (grpo[2] >= 0.7).all() and (grpo[2] >= grpo[1]).all() and (grpo[1] >= grpo[0]).all()),
        "equal rewards, SGD: ips keeps arm 1 within [0.4, 0.6] of the good pair": bool(
            ((ips_share >= 0.4) & (ips_share <= 0.6)).all()),
    }
    return {"rows": out, "claims": claims}


def multiplicity() -> dict[str, Any]:
    """Equal-reward outcomes A (35 paths) and B (7 paths)."""
    env = make_multiplicity_grid()
    out: dict[str, Any] = {}
    for label, cfg in {"entropy 0.001": config("multiplicity"),
                       "entropy 0.01": config("multiplicity", entropy_coef=0.01)}.items():
        for method in ("grpo", "ips"):
            f = final(train(env, method, cfg, SEEDS), "outcome_freqs")
            out[f"{method}, {label}"] = {"A": rounded(f[:, 0]), "B": rounded(f[:, 1]),
                                         "B_share": rounded(f[:, 1] / f.sum(1))}
    ips_share = np.array(out["ips, entropy 0.001"]["B_share"])
    claims = {
        "grpo B < 0.05": bool((np.array(out["grpo, entropy 0.001"]["B"]) < 0.05).all()),
        "ips B share within [0.35, 0.65]": bool(((ips_share >= 0.35) & (ips_share <= 0.65)).all()),
    }
    return {"rows": out, "claims": claims}


HYPERGRIDS = {"D=2 H=8 R0=0.1": (2, 8, 0.1), "D=2 H=8 R0=0.01": (2, 8, 0.01), "D=3 H=8 R0=0.1": (3, 8, 0.1)}
KNOWN_LIMIT = "D=3 H=8 R0=0.1"  # beyond the two settings; its claims are reported as measured, pass or fail
VISITED_MASS = 0.01  # a mode counts as covered when the final policy puts at least this much mass on it


def hypergrid(stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """GRPO vs IPS (group frequency, and exact p as a diagnostic) vs the cross-step count bonus, alone and with
    IPS, on three hyper-grids; rows already in `stored` (an earlier run's section) are kept, not rerun."""
    out: dict[str, Any] = {}
    claims: dict[str, bool] = {}
    for label, (dim, side, r0) in HYPERGRIDS.items():
        env: TabularEnv = make_hypergrid(dim=dim, side=side, r0=r0)
        rows = {}
        kept = (stored or {}).get("rows", {}).get(label, {})
        for name, method, cfg in (("grpo", "grpo", config("hypergrid")), ("ips", "ips", config("hypergrid")),
                                  ("ips (exact p)", "ips", config("hypergrid", ips_exact=True)),
                                  ("count", "count", config("hypergrid")),
                                  ("ips+count", "ips+count", config("hypergrid")),
                                  ("count, c 2", "count", config("hypergrid", count_bonus_coef=2.0)),
                                  ("ips+count, c 2", "ips+count", config("hypergrid", count_bonus_coef=2.0))):
            if name in kept:
                rows[name] = kept[name]
                continue
            run = train(env, method, cfg, SEEDS)
            modes = final(run, "outcome_freqs")
            rows[name] = {"l1": rounded(final(run, "l1_to_target")), "min_mode_mass": rounded(modes.min(1)),
                          "modes_covered": (modes >= VISITED_MASS).sum(1).tolist(), "num_modes": 2**dim}
        out[label] = rows
        name = f"{label} (known limit: group-frequency IPS does not explore)" if label == KNOWN_LIMIT else label
        ratio = np.array(rows["ips"]["l1"]) / np.array(rows["grpo"]["l1"])
        claims[f"{name}: ips L1 <= 0.5 x grpo L1"] = bool((ratio <= 0.5).all())
        claims[f"{name}: ips covers all modes"] = bool(min(rows["ips"]["modes_covered"]) == 2**dim)
    return {"rows": out, "claims": claims}


IDEA_COLUMNS = ("mean_reward", "max_reward", "diversity", "complexity", "outcomes_per_group")


def _ideas_worker(method: str, ips_outcome: str = "peak") -> tuple[str, dict[str, Any], float]:
    """Train one ideas method over all seeds in a fresh process; returns its numbers and CPU seconds."""
    start = time.process_time()
    run = train(IdeaEnv(), method, config("ideas", ips_outcome=ips_outcome), SEEDS)
    numbers = {m: rounded(final(run, m)) for m in IDEA_COLUMNS}
    numbers["complexity_first10"] = rounded(run.curves["complexity"][:, :10].mean(1))
    numbers["token_entropy_first"] = rounded(run.curves["token_entropy"][:, 0])
    numbers["token_entropy_min"] = rounded(run.curves["token_entropy"].min(1))
    numbers["entropy_alpha_max"] = rounded(run.curves["entropy_alpha"].max(1))
    return method, numbers, time.process_time() - start


def ideas(workers: int) -> dict[str, Any]:
    """The execution-rewards paper's Table 1 plus IPS and pop+ips+qd: 6 methods x 5 seeds x 120 epochs, timed end to
    end."""
    start = time.perf_counter()
    longest_first = sorted(IDEA_METHODS, key=lambda m: "pop" not in m)  # population runs cost ~3x: start them first
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_ideas_worker, longest_first))
    wall = time.perf_counter() - start
    by_method = {method: numbers for method, numbers, _ in results}
    rows = {method: by_method[method] for method in IDEA_METHODS}
    cpu = sum(seconds for _, _, seconds in results)
    return {"rows": rows, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "workers": workers,
            "claims": ideas_claims(rows, wall)}


def ideas_claims(rows: dict[str, Any], wall: float) -> dict[str, bool]:
    """The ideas table's claims from its rows and its wall time."""
    mean = {m: {k: float(np.mean(v)) for k, v in r.items()} for m, r in rows.items()}
    others = [m for m in IDEA_METHODS if m != "maxent"]
    return {
        "pop max reward > grpo max reward": mean["pop"]["max_reward"] > mean["grpo"]["max_reward"],
        "maxent has the highest diversity": all(mean["maxent"]["diversity"] > mean[m]["diversity"] for m in others),
        "maxent has the highest complexity": all(mean["maxent"]["complexity"] > mean[m]["complexity"] for m in others),
        "grpo complexity contracts (last 10 < first 10 epochs)": bool(
            (np.array(rows["grpo"]["complexity"]) < np.array(rows["grpo"]["complexity_first10"])).all()),
        "ips (peak outcomes) keeps more distinct outcomes per group than grpo": (
            mean["ips"]["outcomes_per_group"] > mean["grpo"]["outcomes_per_group"]),
        "ideas table under 120 s wall": wall < 120,
    }


POPULATION_METHODS = [m for m in IDEA_METHODS if "pop" in m]


def current_commit() -> str:
    """Short hash of the checked-out commit ('unknown' outside git)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
                          cwd=Path(__file__).parent).stdout.strip() or "unknown"


def complete_hypergrid() -> None:
    """Run the hyper-grid rows the stored results lack (after a method was added to the section), keep every other
    row and section, and rewrite toy.json / toy.md saying what was run when."""
    path = RESULTS / "toy.json"
    results = json.loads(path.read_text())
    start = time.perf_counter()
    results["hypergrid"] = hypergrid(results["hypergrid"])
    results["hypergrid_added"] = {"wall_seconds": round(time.perf_counter() - start, 1), "machine": machine(),
                                  "commit": current_commit()}
    for claim, ok in results["hypergrid"]["claims"].items():
        print(f"  {'PASS' if ok else 'FAIL'}: {claim}", flush=True)
    path.write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (RESULTS / "toy.md").write_text(text)
    print(text)


def rerun_population(workers: int) -> None:
    """Rerun only the ideas rows that use the population code (after a change to it), keep every other row of
    the stored results, re-evaluate the claims and rewrite toy.json / toy.md saying what was rerun when."""
    path = RESULTS / "toy.json"
    results = json.loads(path.read_text())
    commit = current_commit()
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        rerun = list(pool.map(_ideas_worker, POPULATION_METHODS))
    wall = time.perf_counter() - start
    ideas_part = results["ideas"]
    for method, numbers, _ in rerun:
        ideas_part["rows"][method] = numbers
    # The whole-table wall time is that of the last full run; the rerun's own time is recorded beside it.
    ideas_part["claims"] = ideas_claims(ideas_part["rows"], ideas_part["wall_seconds"])
    results["population_rerun"] = {
        "methods": POPULATION_METHODS, "wall_seconds": round(wall, 1), "workers": workers,
        "cpu_seconds": round(sum(seconds for _, _, seconds in rerun), 1), "machine": machine(), "commit": commit,
    }
    path.write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (RESULTS / "toy.md").write_text(text)
    print(text)


IPS_OUTCOMES = ("peak", "grid4", "cell", "semantic")


def ideas_ips_outcome(workers: int, stored: dict[str, Any] | None = None) -> dict[str, Any]:
    """IPS on ideas with each outcome key (`--ips-outcome`), beside GRPO: how often outcomes repeat in a group.
    Keys whose rows `stored` already holds are kept, not rerun."""
    rows = dict((stored or {}).get("rows", {}))
    missing = [key for key in IPS_OUTCOMES if f"ips, --ips-outcome {key}" not in rows]
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_ideas_worker, ["ips"] * len(missing), missing))
    rows.update({f"ips, --ips-outcome {key}": numbers for key, (_, numbers, _) in zip(missing, results)})
    return {"rows": {f"ips, --ips-outcome {key}": rows[f"ips, --ips-outcome {key}"] for key in IPS_OUTCOMES}}


def complete_ips_outcomes(workers: int) -> None:
    """Run the ideas IPS-outcome rows the stored results lack (after a key was added), keep everything else, and
    rewrite toy.json / toy.md saying what was run when."""
    path = RESULTS / "toy.json"
    results = json.loads(path.read_text())
    start = time.perf_counter()
    missing = [k for k in IPS_OUTCOMES if f"ips, --ips-outcome {k}" not in results["ideas_ips_outcome"]["rows"]]
    results["ideas_ips_outcome"] = ideas_ips_outcome(workers, results["ideas_ips_outcome"])
    if missing:  # else only the text is rewritten (e.g. after a change to the notes)
        results["ideas_ips_outcome_added"] = {"wall_seconds": round(time.perf_counter() - start, 1),
                                              "machine": machine(), "commit": current_commit()}
    path.write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (RESULTS / "toy.md").write_text(text)
    print(text)


def machine() -> dict[str, Any]:
    """nproc, CPU model, load average and date, for the fragment."""
    model = platform.processor() or "unknown"
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")),
                     model)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "date": datetime.date.today().isoformat(), "torch_threads_per_run": 1}


def markdown(results: dict[str, Any]) -> str:
    """The BENCHMARKS.md fragment."""
    m = results["machine"]
    lines = ["## Toy reproduction (the execution-rewards and IPS papers)", "",
             f"`benchmarks/toy/toy_reproduction.py`, {m['date']}, {m['nproc']} cores ({m['cpu']}), torch on 1 thread "
             f"per run; load average at the end {m['load_average_1_5_15']} (the machine was shared with other jobs, so "
             "wall times are pessimistic). Seeds 42, 142, 242, 342, 442; numbers are mean ± sample std over seeds of "
             "each seed's mean over the last 10 steps. Defaults are those of `divrl toy` "
             "(bandit: Adam lr 0.02, G 64, 1000 steps; grids: Adam lr 0.05, G 32, entropy bonus 0.001, "
             "3000 / 2000 steps).", ""]
    b = results["bandit_main"]["rows"]
    lines += ["### Bandit, rewards (1, 2, 3, 4): target p = (0.1, 0.2, 0.3, 0.4)", "",
              "| method | L1 to target | max outcome prob | final p (mean) | seed / prototype |",
              "|---|---|---|---|---|"]
    proto = {"grpo": "arm 4 p = 1.0", "ips (group frequency)": "L1 0.02-0.05 (G 64), 0.06-0.13 (G 16)",
             "ips (exact p)": "-"}
    for name, row in b.items():
        lines.append(f"| {name} | {pm(np.array(row['l1']))} | {pm(np.array(row['max_prob']))} | "
                     f"{tuple(round(x, 3) for x in row['freqs'])} | {proto[name]} |")
    table = results["bandit_ablation"]["table"]
    cols = [f"eps={e:g}" for e in EPSILONS] + ["exact"]
    lines += ["", "Group-size x epsilon ablation (group-frequency IPS; L1 to target, and p of the rare arm 1 whose "
              "target is 0.1; mean over seeds). epsilon only acts when it exceeds 1/G.", "",
              "| G | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for g, row in table.items():
        cells = [f"{np.mean(row[c]['l1']):.3f} (p1 {np.mean(row[c]['p_arm1']):.3f})" for c in cols]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    e = results["bandit_equal"]["rows"]
    lines += ["", "### Bandit, equal rewards r = (1, 1, 0, 0), arm 1 initially likelier (logit 0.3, p1 = 0.31, "
              "p2 = 0.23), G 16, 2000 steps", "",
              "| method, optimiser | p(arm 1) at step 500 / 1000 / 2000 (per seed) | arm 1 share of the good pair, "
              "final | prototype |", "|---|---|---|---|"]
    proto_eq = {"grpo": "0.72-0.89 after 2000 steps (Adam)", "ips": "0.43-0.52 (Adam)"}
    for name, row in e.items():
        at = np.array(row["p_arm1_at_500_1000_2000"])
        steps = " / ".join(span(at[i], 2) for i in range(3))
        lines.append(f"| {name} | {steps} | {span(np.array(row['arm1_share_of_good_final']), 2)} | "
                     f"{proto_eq[name.split(',')[0]]} |")
    mu = results["multiplicity"]["rows"]
    lines += ["", "### Multiplicity grid: outcomes A (35 paths) and B (7 paths), equal reward", "",
              "| method | A | B | B share of A + B | prototype |", "|---|---|---|---|---|"]
    proto_mu = {"grpo": "A 0.998-1.0, B 0.0-0.002", "ips": "A 0.497-0.502, B 0.498-0.502"}
    for name, row in mu.items():
        lines.append(f"| {name} | {span(np.array(row['A']))} | {span(np.array(row['B']))} | "
                     f"{span(np.array(row['B_share']))} | {proto_mu[name.split(',')[0]]} |")
    lines += ["", "### Hyper-grid: L1 to p* proportional to R, modes covered (final mass >= 0.01)", "",
              "| grid | method | L1 to target | modes covered (per seed) | min mode mass |", "|---|---|---|---|---|"]
    for grid, rows in results["hypergrid"]["rows"].items():
        for name, row in rows.items():
            lines.append(f"| {grid} | {name} | {pm(np.array(row['l1']))} | {row['modes_covered']} of "
                         f"{row['num_modes']} | {span(np.array(row['min_mode_mass']))} |")
    grid_added = results.get("hypergrid_added")
    if grid_added:
        gm = grid_added["machine"]
        lines += ["", f"Hyper-grid rows with `count` added on {gm['date']} by `--hypergrid-only` (the last addition at "
                  f"commit {grid_added['commit']}, {grid_added['wall_seconds']} s wall for the rows it ran); the other "
                  "rows are from the full run."]
    ide = results["ideas"]
    lines += ["", "### Simulated ideas (the execution-rewards paper, Table 1): 120 epochs, 8 prompts x G 16, 5 seeds",
              "",
              "'outcomes / group' = distinct IPS outcomes (the quality peak an idea belongs to, `--ips-outcome peak`) "
              "among a group's 16 ideas, for every method.", "",
              "| method | mean R | max R | diversity | complexity | outcomes / group | seed: mean R / max R / "
              "diversity / complexity |", "|---|---|---|---|---|---|---|"]
    for method, row in ide["rows"].items():
        seed = " / ".join(f"{v:g}" for v in SEED_IDEAS[method]) if method in SEED_IDEAS else "- (ours)"
        cells = [pm(np.array(row[k]), 4 if k == "mean_reward" else 3) for k in IDEA_COLUMNS]
        lines.append(f"| {method} | " + " | ".join(cells) + f" | {seed} |")
    lines += ["", f"Whole ideas table (6 methods x 5 seeds x 120 epochs): **{ide['wall_seconds']} s wall** with "
              f"{ide['workers']} worker processes, process start-up included ({ide['cpu_seconds']} CPU s inside the "
              "training calls), on the shared machine described above.", ""]
    rerun = results.get("population_rerun")
    if rerun:
        rm = rerun["machine"]
        lines += [f"Rows {', '.join(rerun['methods'])} rerun on {rm['date']} (commit {rerun['commit']}, "
                  "`--population-only`) after the population restart noise became relative to the soup (issue 14.1); "
                  f"{rerun['wall_seconds']} s wall for those rows with {rerun['workers']} workers, load average "
                  f"{rm['load_average_1_5_15']}. Every other row and the whole-table wall time are from the full run "
                  f"of {m['date']}.", ""]
    lines += [
              "IPS outcome key on ideas (`--ips-outcome`; same seeds and defaults, run after the timed table):", "",
              "| method | mean R | max R | diversity | complexity | outcomes / group (by its own key) |",
              "|---|---|---|---|---|---|"]
    for name, row in results["ideas_ips_outcome"]["rows"].items():
        cells = [pm(np.array(row[k]), 4 if k == "mean_reward" else 3) for k in IDEA_COLUMNS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    keys_added = results.get("ideas_ips_outcome_added")
    if keys_added:
        lines += ["", f"The `semantic` row was added on {keys_added['machine']['date']} by `--ips-outcomes-only` "
                  f"(commit {keys_added['commit']}, {keys_added['wall_seconds']} s wall); the others are from the full "
                  "run."]
    lines += ["", "### Claims", ""]
    for section in ("bandit_main", "bandit_equal", "multiplicity", "hypergrid", "ideas"):
        for claim, ok in results[section]["claims"].items():
            lines.append(f"- {'PASS' if ok else 'FAIL'}: {claim}")
    lines += ["", "### Notes", ""] + [f"- {note}" for note in notes(results)] + [""]
    return "\n".join(lines)


def notes(results: dict[str, Any]) -> list[str]:
    """Explanations of the tables, with their numbers taken from `results`."""
    ablation = results["bandit_ablation"]["table"]
    p1_eps02 = [np.mean(row["eps=0.2"]["p_arm1"]) for row in ablation.values()]
    equal = results["bandit_equal"]["rows"]
    adam_share = np.array(equal["grpo, adam lr 0.02"]["arm1_share_of_good_final"])
    multiplicity_b = np.array(results["multiplicity"]["rows"]["grpo, entropy 0.01"]["B"])
    grids = results["hypergrid"]["rows"]
    d3 = grids["D=3 H=8 R0=0.1"]
    ideas_rows = {m: {k: float(np.mean(v)) for k, v in r.items()} for m, r in results["ideas"]["rows"].items()}
    grpo, pop, maxent = ideas_rows["grpo"], ideas_rows["pop"], ideas_rows["maxent"]
    keyed = {key: {k: float(np.mean(v)) for k, v in results["ideas_ips_outcome"]["rows"][f"ips, --ips-outcome {key}"]
                   .items()} for key in IPS_OUTCOMES}
    maxent_rows = results["ideas"]["rows"]["maxent"]
    alpha_max = max(maxent_rows["entropy_alpha_max"])
    alpha_text = "stays at 0 at every step of every seed" if alpha_max == 0 else f"reaches {alpha_max:.4f}"
    d3_claims = [ok for claim, ok in results["hypergrid"]["claims"].items() if claim.startswith(KNOWN_LIMIT)]
    return [
        "Bandit: exact-p IPS sits on the target with almost no noise: at p = r / sum r every scaled reward r / p "
        "equals sum r, so all group advantages vanish. Group-frequency IPS is biased against rare outcomes: a sampled "
        "outcome's p_hat is at least 1/G, so an outcome with p < 1/G is up-weighted by at most G instead of 1/p. "
        f"The rare arm 1 (target 0.1) ends at p1 = {np.mean(ablation['G=4']['eps=0.001']['p_arm1']):.3f} with G = 4 "
        f"and {np.mean(ablation['G=64']['eps=0.001']['p_arm1']):.3f} with G = 64; L1 falls from G = 4 to G = 32 and "
        "is flat within seed noise from 32 to 64. A floor epsilon above 1/G caps the up-weighting further and "
        f"worsens the bias: with epsilon = 0.2 arm 1 all but disappears at every G (p1 {min(p1_eps02):.3f}-"
        f"{max(p1_eps02):.3f}).",
        "Equal-reward bandit: the IPS paper's collapse theorem is about gradient flow. With plain SGD GRPO drifts onto "
        "the "
        "initially likelier arm as predicted, in every seed. With Adam it does not reliably: Adam divides each "
        "logit's step by its own gradient scale, which largely cancels the probability multiplier p_i that drives "
        f"the drift, and the final arm-1 share of the good pair spreads over {adam_share.min():.2f}-"
        f"{adam_share.max():.2f} across seeds (both arms win somewhere). The prototype's 0.72-0.89 with Adam "
        "(3 seeds) lies inside that spread. IPS keeps the pair balanced under both optimisers.",
        "Multiplicity grid: with a per-state entropy bonus of 0.01 instead of 0.001, GRPO's B frequency after 3000 "
        f"steps is {multiplicity_b.min():.3f}-{multiplicity_b.max():.3f} across seeds: once nearly every sample "
        "earns reward 1 the group advantages vanish, leaving the entropy bonus as the only force. With 0.001 GRPO "
        "collapses onto A as the seed reports. IPS holds the A/B balance under both.",
        "Hyper-grid: on D=2, H=8 every cell except the 4 best has target mass below 1/G = 1/32, so group-frequency "
        "IPS under-weights them (the bandit's bias); exact-p IPS removes the gap "
        f"(L1 {np.mean(grids['D=2 H=8 R0=0.1']['ips (exact p)']['l1']):.3f}). IPS does not create exploration: on "
        "D=3 the far modes are rarely sampled by the initial policy (it stops with probability 1/(D+1) at the "
        f"start), and group-frequency IPS covers only {count_range(d3['ips']['modes_covered'])} of 8 modes, while "
        "exact-p IPS, which up-weights a rarely sampled outcome by its true 1/p, covers "
        f"{count_range(d3['ips (exact p)']['modes_covered'])}. The D=3 grid's two claims are listed as measured "
        f"({sum(d3_claims)} of {len(d3_claims)} pass): it marks where group-frequency IPS stops working, not a "
        "setting the seed reports. The cross-step outcome-count bonus (`count`: + 0.5 / sqrt(1 + n), n = how often "
        "the cell was sampled so far, issue 13's method for the diagnosed failure) covers "
        f"{count_range(d3['count']['modes_covered'])} of the D=3 grid's 8 modes alone (L1 "
        f"{np.mean(d3['count']['l1']):.3f}) and {count_range(d3['ips+count']['modes_covered'])} with IPS (L1 "
        f"{np.mean(d3['ips+count']['l1']):.3f}), against group-frequency IPS's "
        f"{count_range(d3['ips']['modes_covered'])} (L1 {np.mean(d3['ips']['l1']):.3f}); with c = 2 it covers "
        f"{count_range(d3['count, c 2']['modes_covered'])} alone and "
        f"{count_range(d3['ips+count, c 2']['modes_covered'])} "
        f"with IPS (L1 {np.mean(d3['ips+count, c 2']['l1']):.3f}). Alone the bonus cannot stop the collapse: over "
        "thousands of steps of one prompt every cell's count grows and the bonus fades (c / sqrt(1 + n) -> 0), leaving "
        "GRPO.",
        "Ideas, our choices (the seed gives no peak centres and no lambda): c_i = (2 + 2 i) u_i with u_i random unit "
        "vectors (landscape seed 0), Q(x) = max_i h_i exp(-||x - c_i||^2 / (2 w_i^2)), P_exec lambda = 1. One epoch "
        "= one batch of 8 prompts x 16 ideas followed by 4 clipped gradient steps. The Gaussian head's log-std is "
        "clamped to [-20, 2] as in SAC: before novelty paid only executed ideas, MaxEnt's novelty bonus grew the std "
        "without bound without the clamp (complexity ~1e9 after 120 epochs). " + (
            f"MaxEnt's complexity saturates at {maxent['complexity']:.2f}, close to E||N(0, e^4 I_16)|| = 29.1 and to "
            "the seed's 29.17 ± 0.22, which suggests the seed's policy hit the same clamp."
            if maxent["complexity"] > 25 else
            f"MaxEnt's complexity is {maxent['complexity']:.2f}, far below the clamp's E||N(0, e^4 I_16)|| = 29.1 and "
            "the seed's 29.17 ± 0.22: novelty pays only ideas the task scores above 0 (executed ones), as the LLM "
            "trainer's novelty does (`divrl.methods.novelty`, run by this toy since issue 30), so wandering off "
            "into ideas that are never executed earns nothing. Until issue 30 the toy paid every idea, and MaxEnt "
            "expanded to the clamp (29.10) with diversity 0.997 and mean reward -0.0003; now it trades that "
            "diversity for reward."),
        "Ideas, what an IPS outcome is: the IPS paper counts outcomes as equivalence classes of solutions (a "
        "hypothesis "
        "up to equivalence, a Murcko scaffold), and IPS only reweights when a group's outcomes repeat. Keyed by the "
        "QD 10 x 10 behaviour cell (`--ips-outcome cell`), a group of 16 ideas holds "
        f"{keyed['cell']['outcomes_per_group']:.1f} distinct outcomes on average over the last 10 epochs, so every "
        "reward is scaled by nearly the same factor, group-std normalisation cancels it, and IPS ends close to GRPO "
        f"(diversity {keyed['cell']['diversity']:.3f} vs GRPO's {grpo['diversity']:.3f}). The default is therefore "
        "the quality peak an idea belongs to (`--ips-outcome peak`: the peak whose bump gives Q(x), 8 solution "
        "families, the continuous analogue of the hyper-grid's modes): "
        f"{keyed['peak']['outcomes_per_group']:.1f} distinct per group, against GRPO's "
        f"{grpo['outcomes_per_group']:.1f} on the same key, with diversity {keyed['peak']['diversity']:.3f} and mean "
        f"reward {keyed['peak']['mean_reward']:.4f} (GRPO {grpo['mean_reward']:.4f}). A 4 x 4 behaviour grid "
        f"(`grid4`) sits between: {keyed['grid4']['outcomes_per_group']:.1f} per group, diversity "
        f"{keyed['grid4']['diversity']:.3f}. Semantic classes found without the landscape (`--ips-outcome semantic`, "
        "leader clustering of the idea vectors at cosine 0.6, what `ips_outcome_key='semantic'` does for text) are as "
        f"fine as the cells here: {keyed['semantic']['outcomes_per_group']:.1f} per group, diversity "
        f"{keyed['semantic']['diversity']:.3f}, because 16-dimensional ideas around random directions rarely reach "
        "cosine 0.6; on text, paraphrases sharing words do (0.5-0.8 on hashed 3-grams, unrelated sentences ~0.1).",
        f"Ideas, MaxEnt's adaptive entropy coefficient {alpha_text} (`entropy_alpha` in the metrics). Its entropy "
        "is the Gaussian head's per-coordinate differential entropy, log sigma + 0.5 log(2 pi e), which starts at "
        f"{np.mean(maxent_rows['token_entropy_first']):.2f} (sigma ~ 1); its lowest value in any seed is "
        f"{min(maxent_rows['token_entropy_min']):.2f}, against the seed's target H* = 1.0. " + (
            "Above the target the dual step only pushes alpha toward 0, so MaxEnt's expansion comes from the novelty "
            "bonus. " if alpha_max == 0 else "") +
        "We keep the seed's H* = 1.0: the seed does not say how its entropy is measured, and its ablation (H* = 0 "
        "behaves like GRPO) implies its bonus was active at H* = 1.0, so its measure likely differs from ours. For "
        f"comparison GRPO's per-seed lowest entropy averages {grpo['token_entropy_min']:.2f}: the target binds only "
        "for a policy whose entropy contracts below it.",
        f"Ideas, where we differ: our GRPO diversity falls further ({grpo['diversity']:.3f} vs the seed's 0.9675, "
        f"multi-seed 0.9507 ± 0.0264) and so does Pop's ({pop['diversity']:.3f} vs 0.9969). By construction, after "
        "every soup the K members are one policy plus restart noise relative to it (each weight tensor moves by "
        f"population_sigma = {config('ideas').population_sigma:g} of the soup tensor's norm, "
        "`divrl.core.perturb_relative_`, the "
        "same rule as the LoRA trainer; the execution-rewards paper's absolute sigma_p = 0.01 is 0.2-0.34 of our MLP's "
        "hidden-layer "
        "weights at the first soup), so the population's ideas are "
        "about as diverse as one member's; the paper does not say how its Pop kept 0.997. Pop's complexity "
        f"contracts like GRPO's ({pop['complexity']:.2f}) where the seed reports 3.75 with slight expansion. Pop's "
        "max reward is taken over the population's 5 x 128 ideas per epoch against GRPO's 128, so part of its "
        "lead on max reward is the larger sample (the seed's Pop pays the same 5x cost), and max reward is "
        "dominated by the N(0, 0.3^2) execution noise on executed ideas. We did not tune the environment toward "
        "the seed's table.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="processes for the ideas table (default 2)")
    parser.add_argument("--hypergrid-only", action="store_true",
                        help="run only the hyper-grid rows the stored results lack and update them around it")
    parser.add_argument("--ips-outcomes-only", action="store_true",
                        help="run only the ideas IPS-outcome rows the stored results lack and update them around it")
    parser.add_argument("--population-only", action="store_true",
                        help="rerun only the ideas rows that use the population code (" + ", ".join(POPULATION_METHODS)
                        + ") and update the stored results around them")
    args = parser.parse_args()
    if args.population_only:
        rerun_population(args.workers)
        return
    if args.hypergrid_only:
        complete_hypergrid()
        return
    if args.ips_outcomes_only:
        complete_ips_outcomes(args.workers)
        return
    start = time.perf_counter()
    results: dict[str, Any] = {}
    for name, section in (("ideas", lambda: ideas(args.workers)),
                          ("ideas_ips_outcome", lambda: ideas_ips_outcome(args.workers)), ("bandit_main", bandit_main),
                          ("bandit_ablation", bandit_ablation), ("bandit_equal", bandit_equal),
                          ("multiplicity", multiplicity), ("hypergrid", hypergrid)):
        t0 = time.perf_counter()
        results[name] = section()
        print(f"{name}: {time.perf_counter() - t0:.1f}s", flush=True)
        for claim, ok in results[name].get("claims", {}).items():
            print(f"  {'PASS' if ok else 'FAIL'}: {claim}", flush=True)
    results["machine"] = machine()
    results["total_wall_seconds"] = round(time.perf_counter() - start, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "toy.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (RESULTS / "toy.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
