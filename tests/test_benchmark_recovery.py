"""The real-model recovery benchmark's aggregation: seeds pooled per instance, then bootstrapped over instances."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import hypospace_recovery as bench  # noqa: E402


def _eval(curves: dict[str, list[float]], admissible: int = 4) -> dict:
    instances = [{"id": i, "n_admissible": admissible, "curve": c, "recovery": c[-1], "validity": c[-1] / 2,
                  "uniqueness": 0.5} for i, c in curves.items()]
    return {"instances": instances, "recovery": {"mean": sum(c[-1] for c in curves.values()) / len(curves)}}


def test_pool_method_averages_seeds_within_instances() -> None:
    seed0 = _eval({"a": [0.25, 0.5], "b": [0.0, 0.25]})
    seed1 = _eval({"b": [0.25, 0.75], "a": [0.25, 1.0]})  # instance order does not matter
    pooled = bench.pool_method("IPS", [seed0, seed1], resamples=200)
    assert pooled["seeds"] == 2 and pooled["n_instances"] == 2
    assert pooled["curve"]["mean"] == pytest.approx([(0.25 + 0.125) / 2, (0.75 + 0.5) / 2])
    assert pooled["distinct_valid"]["mean"][-1] == pytest.approx(4 * (0.75 + 0.5) / 2)
    assert pooled["per_seed_recovery"] == [0.375, 0.875]
    low, high = pooled["recovery"]["ci_low"], pooled["recovery"]["ci_high"]
    assert 0.5 <= low <= 0.625 <= high <= 0.75  # the two pooled instances: 0.75 and 0.5


def test_plan_puts_the_multi_seed_comparison_first() -> None:
    protocol = bench.Protocol(methods=("qd", "grpo", "ips"), seeds=(0, 1))
    assert bench.plan(protocol) == [("grpo", 0), ("ips", 0), ("grpo", 1), ("ips", 1), ("qd", 0)]


def test_task_settings_become_cli_flags() -> None:
    voxel, boolean, causal = (bench.TASKS[name] for name in ("voxel", "boolean", "causal"))
    assert voxel.eval_args == ["--grid", "3", "--max-height", "3", "--max-blocks", "3", "--limit", "100"]
    assert boolean.train_args == ["--task_arg", "operators=basic"]
    assert boolean.eval_args[:2] == ["--operators", "basic"]
    assert causal.eval_args[causal.eval_args.index("--observations") + 1] == "3"
    for setting in bench.TASKS.values():
        for method in bench.METHODS:
            assert (bench.RECIPES / setting.task / f"{method}.yaml").is_file()
