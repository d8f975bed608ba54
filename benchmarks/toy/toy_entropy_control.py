"""MaxEnt's entropy controller beside TRL's `use_adaptive_entropy` on the toy environments (issue 42).

From a low-entropy warm start (per-token entropy 0.08-0.15, the state after SFT that broke evidence v3's MaxEnt), and
on the seed paper's simulated ideas from their usual start, 10 seeds each:
- the seed paper's MaxEnt: dual descent toward H* = 1.0, unbounded coefficient (`maxent_entropy_target=1.0`);
- dual descent toward the `auto` target (the policy's own entropy, measured on the first step; MaxEnt's `auto`
  before issue 42's switch);
- TRL's rule (Skywork-OR1: coefficient +- 0.005 per step, clamped to [0, 1], applied only while the entropy is at or
  below the target; GRPOConfig's defaults, `divrl.toy.trl_entropy`) toward H* = 1.0, toward TRL's default 0.2 and
  toward the `auto` target (MaxEnt's `auto` now, in the toy and the LLM trainer);
- GRPO without any entropy term, for reference.
Every MaxEnt row keeps novelty and length bins (the toy's `maxent`); only the entropy controller differs.
Per seed, over the last 10 steps: the entropy against the target, the largest coefficient of the run, the expected
reward and the valid share (exact outcome distribution) against the warm start's. The ideas section also checks that
the seed paper's MaxEnt row of `benchmarks/results/toy.json` (seeds 42-442, H* = 1.0) is reproduced exactly.

Writes benchmarks/results/toy_entropy_control.{json,md}. Run: `.venv/bin/python benchmarks/toy/toy_entropy_control.py`
(about 3 CPU minutes, one thread; `--quick`: a smoke run that writes nothing).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from divrl.toy.envs import IdeaEnv, TabularEnv, make_bandit, make_hypergrid, make_multiplicity_grid
from divrl.toy.options import ENV_DEFAULTS
from divrl.toy.policies import TabularPolicy
from divrl.toy.runner import MethodRun, TrainConfig, train

SEEDS = [42 + 100 * i for i in range(10)]  # the first 5 are toy_reproduction.py's
BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"
STEPS = 1000  # tabular environments (the toy default is 1000-3000): every controller has settled by then
# label -> (toy method, TrainConfig overrides)
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "grpo (no entropy term)": ("grpo", {}),
    "seed paper: dual, H* = 1.0": ("maxent", {"maxent_entropy_target": 1.0}),
    "dual, H* = auto": ("maxent", {"maxent_entropy_target": "auto", "entropy_controller": "dual"}),
    "TRL rule, H* = 1.0": ("maxent", {"maxent_entropy_target": 1.0, "entropy_controller": "trl"}),
    "TRL rule, H* = 0.2 (TRL default)": ("maxent", {"maxent_entropy_target": 0.2, "entropy_controller": "trl"}),
    "TRL rule, H* = auto": ("maxent", {"maxent_entropy_target": "auto", "entropy_controller": "trl"}),
}
HELD = 0.8  # a controller holds its target when the final entropy is at least this share of it
SEED_PAPER_MAXENT = (0.0082, 0.4420, 0.9944, 28.861)  # the execution-rewards paper, Table 1: mean R, max R, div, cx


def warm_start(env: TabularEnv, action_of: Callable[[int], int], logit: float) -> TabularEnv:
    """`env` whose policy starts as if fine-tuned on one path: logit `logit` on `action_of(state)` in every state."""
    logits = torch.zeros_like(env.initial_logits)
    logits[torch.arange(env.num_states), torch.tensor([action_of(s) for s in range(env.num_states)])] = logit
    return dataclasses.replace(env, initial_logits=logits)


def hypergrid_warm() -> TabularEnv:
    """D = 2, H = 8, warm-started on the path to the mode cell (6, 6) (reward 2.6): right to x = 6, up to y = 6,
    stop; valid = a mode region (reward above R0)."""
    side = 8

    def toward_mode(state: int) -> int:
        x, y = divmod(state, side)
        return 0 if x < 6 else 1 if y < 6 else 2

    return warm_start(make_hypergrid(side=side), toward_mode, 5.0)


def multiplicity_warm() -> TabularEnv:
    """The 7-step grid warm-started on the path to outcome B (6, 1). Two actions per state: the largest reachable
    per-token entropy is log 2 = 0.69, so H* = 1.0 cannot be reached."""
    cells = [(x, d - x) for d in range(7) for x in range(d + 1)]
    return warm_start(make_multiplicity_grid(), lambda s: 0 if cells[s][0] < 6 else 1, 3.3)


# name -> (CLI defaults, environment, what it is)
ENVS: dict[str, tuple[str, Callable[[], TabularEnv], str]] = {
    "bandit": ("bandit", lambda: make_bandit([1, 0.5, 0.5, 0.5, 0, 0, 0, 0], [0, 6.5, 0, 0, 0, 0, 0, 0]),
               "8 arms paying 1, 0.5 x 3, 0 x 4, warm-started on a 0.5 arm (p 0.99); valid = reward > 0"),
    "hypergrid": ("hypergrid", hypergrid_warm, "D = 2, H = 8, warm-started on the path to the mode cell (6, 6); "
                  "valid = a mode region"),
    "multiplicity": ("multiplicity", multiplicity_warm, "7-step grid (A, B pay 1), warm-started on B's path; "
                     "H* = 1.0 is out of reach (max 0.69)"),
}


def valid_share(env: TabularEnv, dist: torch.Tensor) -> torch.Tensor:
    """Probability of an outcome paying more than the environment's least reward (R0 on the hyper-grid, 0 else)."""
    return dist[..., env.outcome_rewards > env.outcome_rewards.min()].sum(-1)


def per_seed(run: MethodRun, cfg: TrainConfig) -> dict[str, list[float]]:
    """Entropy and coefficient numbers of each seed: first, final (last 10 steps), lowest, largest alpha."""
    entropy, alpha = run.curves["token_entropy"], run.curves["entropy_alpha"]
    target = cfg.method_value("maxent_entropy_target")
    targets = (entropy[:, 0] * cfg.method_value("maxent_entropy_auto_scale") if target == "auto"
               else np.full(len(entropy), target))
    return {"entropy_start": entropy[:, 0], "target": targets, "entropy_final": entropy[:, -10:].mean(1),
            "entropy_min": entropy.min(1), "alpha_max": alpha.max(1)}


def tabular_section(name: str, quick: bool) -> dict[str, Any]:
    defaults, build, about = ENVS[name]
    env = build()
    policy = TabularPolicy(env, 1)
    start = policy.outcome_distribution(policy.params)[0]
    rows = {}
    for label, (method, overrides) in ROWS.items():
        cfg = TrainConfig(**{**ENV_DEFAULTS[defaults], "steps": 60 if quick else STEPS, "entropy_coef": 0.0,
                             **overrides})
        run = train(env, method, cfg, SEEDS[:2] if quick else SEEDS)
        assert run.final_distribution is not None
        final = torch.from_numpy(run.final_distribution)
        numbers = per_seed(run, cfg)
        numbers |= {"reward": (final @ env.outcome_rewards.double()).numpy(), "valid": valid_share(env, final).numpy()}
        rows[label] = {k: np.round(v, 4).tolist() for k, v in numbers.items()} if method == "maxent" else {
            k: np.round(v, 4).tolist() for k, v in numbers.items() if k not in ("target", "alpha_max")}
        print(f"  {name} / {label}", flush=True)
    return {"about": about, "steps": 60 if quick else STEPS,
            "start": {"reward": round(float(start.double() @ env.outcome_rewards.double()), 4),
                      "valid": round(float(valid_share(env, start)), 4)}, "rows": rows}


def ideas_section(quick: bool) -> dict[str, Any]:
    rows = {}
    seeds = SEEDS[:2] if quick else SEEDS
    for label, (method, overrides) in ROWS.items():
        cfg = TrainConfig(**{**ENV_DEFAULTS["ideas"], **({"steps": 12} if quick else {}), **overrides})
        run = train(IdeaEnv(), method, cfg, seeds)
        numbers = {m: run.curves[m][:, -10:].mean(1) for m in ("mean_reward", "max_reward", "diversity", "complexity")}
        if method == "maxent":
            numbers |= per_seed(run, cfg)
        rows[label] = {k: np.round(v, 4).tolist() for k, v in numbers.items()}
        print(f"  ideas / {label}", flush=True)
    return {"rows": rows, "reproduces_toy_json": None if quick else reproduces_toy_row(rows)}


def reproduces_toy_row(rows: dict[str, Any]) -> bool:
    """Whether the seed paper's MaxEnt row on seeds 42-442 equals toy_reproduction.py's stored one (4 digits)."""
    stored = json.loads((RESULTS / "toy.json").read_text())["ideas"]["rows"]["maxent"]
    ours = rows["seed paper: dual, H* = 1.0"]
    return all(ours[m][:5] == stored[m] for m in ("mean_reward", "max_reward", "diversity", "complexity"))


def pm(values: list[float], digits: int = 3) -> str:
    array = np.asarray(values)
    return f"{array.mean():.{digits}f} ± {array.std(ddof=1):.{digits}f}" if len(array) > 1 else f"{array[0]:.{digits}f}"


def held(row: dict[str, Any]) -> str:
    final, target = np.asarray(row["entropy_final"]), np.asarray(row["target"])
    return f"{int((final >= HELD * target).sum())} of {len(final)}"


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = ["## MaxEnt's entropy controller vs TRL's adaptive entropy (issue 42)", "",
             f"`benchmarks/toy/toy_entropy_control.py`, {m['date']}, {m['nproc']} cores ({m['cpu']}), "
             f"torch on 1 thread; {results['cpu_seconds']} CPU s. "
             f"Seeds {', '.join(map(str, results['seeds']))}; each cell is the mean ± "
             "sample std over seeds of each seed's mean over the last 10 steps. Every MaxEnt row keeps novelty and "
             "length bins; only the entropy controller differs. 'dual' = MaxEnt's dual descent (lr 0.01, alpha >= 0, "
             "unbounded); 'TRL rule' = TRL's `use_adaptive_entropy` (GRPOConfig defaults: +- 0.005 per step, "
             "clamped to [0, 1], applied only while entropy <= target); 'auto' = the policy's own entropy on the "
             f"first step. 'held' = seeds whose final entropy is at least {HELD} x the target; 'max coef' = the "
             "largest coefficient of the run.", ""]
    for name, section in results["tabular"].items():
        start = section["start"]
        lines += [f"### {name}: {section['about']} ({section['steps']} steps)", "",
                  f"Warm start: expected reward {start['reward']:.3f}, valid share {start['valid']:.3f}.", "",
                  "| controller | entropy start | target | entropy final | held | lowest entropy | max coef | "
                  "expected reward | valid share |", "|---|---|---|---|---|---|---|---|---|"]
        for label, row in section["rows"].items():
            control = [pm(row["target"]), pm(row["entropy_final"]), held(row), pm(row["entropy_min"]),
                       pm(row["alpha_max"])] if "target" in row else ["-", pm(row["entropy_final"]), "-",
                                                                      pm(row["entropy_min"]), "-"]
            lines.append(f"| {label} | {pm(row['entropy_start'])} | " + " | ".join(control)
                         + f" | {pm(row['reward'])} | {pm(row['valid'])} |")
        lines.append("")
    ideas = results["ideas"]
    lines += ["### Simulated ideas (the execution-rewards paper, Table 1; usual start, 120 epochs)", "",
              "| controller | mean R | max R | diversity | complexity | entropy start | target | entropy final | "
              "max coef |", "|---|---|---|---|---|---|---|---|---|"]
    for label, row in ideas["rows"].items():
        control = ([pm(row[k]) for k in ("entropy_start", "target", "entropy_final", "alpha_max")]
                   if "target" in row else ["-"] * 4)
        lines.append(f"| {label} | {pm(row['mean_reward'], 4)} | {pm(row['max_reward'])} | {pm(row['diversity'])} | "
                     f"{pm(row['complexity'])} | " + " | ".join(control) + " |")
    seed = " / ".join(f"{v:g}" for v in SEED_PAPER_MAXENT)
    verdict = {True: "yes", False: "NO", None: "not checked (--quick)"}[ideas["reproduces_toy_json"]]
    lines += ["", f"The seed paper reports MaxEnt at {seed} (mean R / max R / diversity / complexity). The seed "
              "paper's row above, on seeds 42-442, is identical to the MaxEnt row of `benchmarks/results/toy.json` "
              f"(`toy_reproduction.py`, H* = 1.0): {verdict}."]
    return "\n".join(lines) + "\n"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or "unknown"
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "date": datetime.date.today().isoformat()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds, few steps: a smoke run (prints, writes nothing)")
    args = parser.parse_args()
    start = time.process_time()
    torch.set_num_threads(1)
    results: dict[str, Any] = {"seeds": SEEDS[:2] if args.quick else SEEDS,
                               "tabular": {name: tabular_section(name, args.quick) for name in ENVS},
                               "ideas": ideas_section(args.quick)}
    results["cpu_seconds"] = round(time.process_time() - start, 1)
    results["machine"] = machine()
    text = markdown(results)
    if not args.quick:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "toy_entropy_control.json").write_text(json.dumps(results, indent=1) + "\n")
        (RESULTS / "toy_entropy_control.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
