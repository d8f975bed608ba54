"""GRPO's fp32 residue on flat groups (all rewards equal) and the drift it causes (DivRLConfig.zero_flat_groups).

A group whose completions all get the same reward carries no signal, but (r - mean) / (std + 1e-4) in fp32 is not 0
for a shared reward that fp32 cannot hold exactly (1.2, 0.2): the mean is an ulp off and the std ~1e-7. Part 1 lists
that residue per shared reward (`core.group_advantages`, TRL's convention: unbiased std, eps 1e-4). Part 2 trains
GRPO on a 4-arm bandit where every arm pays the same reward, from a skewed start (logits 1, 0, 0, 0): nothing should
change, and with an exact reward (1.0) or with `zero_flat_groups` nothing does; with 1.2 the residue pushes every
sampled arm up, and Adam turns that into a steady drift toward the arms sampled most.

Writes benchmarks/results/flat_group_residue.{json,md}. Run: `.venv/bin/python benchmarks/toy/flat_group_residue.py`
(about a minute on 2 cores).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from toy_reproduction import SEEDS, machine, pm

from divrl.core import group_advantages
from divrl.toy.envs import make_bandit
from divrl.toy.runner import TrainConfig, train

BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"
GROUP_SIZE = 8
SHARED_REWARDS = (0.2, 0.5, 1.0, 1.2, 1.5, 2.0, 3.7)
START_LOGITS = [1.0, 0.0, 0.0, 0.0]
BANDIT = TrainConfig(steps=300, group_size=GROUP_SIZE, lr=0.05)


def residues() -> list[dict[str, Any]]:
    """GRPO's fp32 advantage of every completion in a group of GROUP_SIZE equal rewards, per shared reward."""
    rows = []
    for reward in SHARED_REWARDS:
        group = torch.full((GROUP_SIZE,), reward, dtype=torch.float32)
        advantage = group_advantages(group, GROUP_SIZE)
        rows.append({"reward": reward, "advantage": float(advantage[0]), "std": float(group.std()),
                     "same_for_all": bool((advantage == advantage[0]).all())})
    return rows


def drift(reward: float, zero_flat_groups: bool) -> dict[str, Any]:
    """The bandit's modal-arm probability at the start and after BANDIT.steps GRPO steps, per seed."""
    env = make_bandit([reward] * 4, initial_logits=START_LOGITS)
    cfg = TrainConfig(**{**BANDIT.__dict__, "zero_flat_groups": zero_flat_groups})
    modal = train(env, "grpo", cfg, SEEDS).curves["max_outcome_prob"]
    return {"reward": reward, "zero_flat_groups": zero_flat_groups, "start": modal[:, 0].tolist(),
            "end": modal[:, -1].tolist()}


def markdown(results: dict[str, Any]) -> str:
    """The BENCHMARKS.md fragment."""
    m = results["machine"]
    lines = [
        "## Flat groups: GRPO's fp32 residue and the drift it causes (benchmarks/toy/flat_group_residue.py)", "",
        f"{m['cpu']}, {m['date']}, {results['wall_seconds']} s. A group whose {GROUP_SIZE} completions share one "
        "reward carries no signal; the advantage GRPO's normalisation gives each of them in fp32 (TRL's convention, "
        "`core.group_advantages`):", "",
        "| shared reward | group std (fp32) | advantage | same for all 8 |", "|---|---|---|---|",
        *(f"| {r['reward']} | {r['std']:.2e} | {r['advantage']:+.2e} | {r['same_for_all']} |"
          for r in results["residues"]), "",
        f"GRPO on a 4-arm bandit where every arm pays the same reward, from logits {START_LOGITS}, "
        f"G = {GROUP_SIZE}, Adam lr {BANDIT.lr}, {BANDIT.steps} steps, seeds {SEEDS}: probability of the likeliest "
        "arm (mean ± sd over seeds). Every group is flat, so it should not move:", "",
        "| reward of every arm | zero_flat_groups | start | after training |", "|---|---|---|---|",
    ]
    for row in results["drift"]:
        lines.append(f"| {row['reward']} | {row['zero_flat_groups']} | {pm(np.array(row['start']))} | "
                     f"{pm(np.array(row['end']))} |")
    lines += ["", "With `zero_flat_groups: true` (DivRLConfig; off by default, as TRL) flat groups get advantage "
              "exactly 0 and the policy stays where it started.", ""]
    return "\n".join(lines)


def main() -> None:
    start = time.perf_counter()
    results: dict[str, Any] = {"residues": residues(),
                               "drift": [drift(reward, zero) for reward in (1.0, 1.2) for zero in (False, True)]}
    results["machine"] = machine()
    results["wall_seconds"] = round(time.perf_counter() - start, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "flat_group_residue.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (RESULTS / "flat_group_residue.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
