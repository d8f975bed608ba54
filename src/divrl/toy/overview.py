"""The demo's opening: GRPO's collapse and the remedies' coverage on the bandit and the hyper-grid, in seconds.

Trains each method on both tabular environments with every seed at once (`divrl.toy.runner.train`), then draws
one figure (per environment: the likeliest outcome's probability over training, and the final outcome
distribution against the reward-proportional target) and returns a markdown table of the final numbers.
`divrl toy --env bandit|hypergrid` runs the same comparison at the prototypes' full step counts.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from divrl.toy.cli import build_env
from divrl.toy.options import ENV_DEFAULTS

if TYPE_CHECKING:
    from divrl.toy.runner import TrainConfig

METHODS = ("grpo", "ips", "maxent")
# Steps per environment: the bandit prototype's 1000 (MaxEnt settles late there); 800 of the hyper-grid's 2000,
# by which GRPO has collapsed and IPS has settled (`divrl toy --env hypergrid` runs all 2000).
STEPS = {"bandit": 1000, "hypergrid": 800}
# Final-window metrics of the table: key -> column title.
COLUMNS = {"max_outcome_prob": "P(likeliest outcome)", "distinct_outcomes": "distinct outcomes in a step's batch",
           "l1_to_target": "L1 to the target"}


def overview_config(env: str, steps: int) -> TrainConfig:
    """The toy's settings for `env` at `steps`, without MaxEnt's far-below-target warning: the toy's entropy target
    is its own choice, so the warning would tell the demo's reader to change a setting they did not make."""
    from divrl.toy.runner import TrainConfig

    return replace(TrainConfig(**ENV_DEFAULTS[env], maxent_warn_steps=0), steps=steps)


def run_overview(out: Path, seeds: int = 5, methods: tuple[str, ...] = METHODS) -> tuple[Path, list[str]]:
    """Train `methods` on both environments with `seeds` seeds; write `out/toy.png`; the report's table lines."""
    from divrl.toy.plots import plot_overview
    from divrl.toy.report import summarise
    from divrl.toy.runner import train

    seed_list = [42 + 100 * i for i in range(seeds)]
    panels = []
    lines = [f"| environment | method | {' | '.join(COLUMNS.values())} |", "|---|---|" + "---|" * len(COLUMNS)]
    for name, steps in STEPS.items():
        env = build_env(name, {})
        cfg = overview_config(name, steps)
        runs = [train(env, method, cfg, seed_list) for method in methods]
        panels.append((name, env, runs))
        for run in runs:
            final = summarise(run)["final"]
            cells = [f"{final[key]['mean']:.2f} ± {final[key]['std']:.2f}" for key in COLUMNS]
            lines.append(f"| {name} ({steps} steps) | {run.method} | {' | '.join(cells)} |")
    path = plot_overview(panels, out / "toy.png")
    return path, lines

