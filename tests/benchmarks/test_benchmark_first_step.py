"""benchmarks/micro/first_step.py's bookkeeping on made-up profiles (no model): the parts per step and the functions
whose own time in step 1 most exceeds the later steps'."""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "micro"))

import first_step as bench  # noqa: E402


def warm_up(rounds: int) -> int:
    total = 0
    for i in range(rounds):  # a plain loop: all its time is warm_up's own
        total += i * i
    return total


def _calculate_rewards(rounds: int) -> int:  # named as TRL's, so it counts as the rewards part
    return warm_up(rounds)


def _profile(rounds: int) -> pstats.Stats:
    profile = cProfile.Profile()
    profile.enable()
    _calculate_rewards(rounds)
    profile.disable()
    return pstats.Stats(profile)


def test_step_one_excess_names_the_function_that_grew(monkeypatch) -> None:
    monkeypatch.setitem(bench.PARTS, "rewards", (Path(__file__).name, "_calculate_rewards"))
    profiles = [_profile(3_000_000), _profile(1_000), _profile(1_000)]  # step 1 thousands of times the work
    doc = bench.summarise(profiles, top=3)
    assert doc["first_step_excess"][0]["function"].endswith("(warm_up)")
    assert doc["first_step_excess"][0]["seconds"] > 0
    assert doc["parts"][0]["rewards"] > doc["parts"][1]["rewards"] > 0 and doc["parts"][0]["generation"] == 0
    assert doc["step_seconds"][0] > doc["step_seconds"][1]
    doc |= {"torch_threads": 1, "cores": 2, "cpu": "test", "commit": "abc1234", "date": "2026-12-02",
            "load_before": 0.1, "load_after": 0.2}
    table = bench.markdown(doc)
    assert "| rewards | " in table and "| whole step | " in table and "(warm_up)` |" in table
