"""benchmarks/micro/first_step.py's bookkeeping on made-up profiles (no model): the parts per step and the functions
whose own time in step 1 most exceeds the later steps'."""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "micro"))

import first_step as bench  # noqa: E402

CLOCK = [0.0]  # the profiler's fake clock: a function's time is what it advances it by, whatever the machine


def warm_up(seconds: float) -> None:
    CLOCK[0] += seconds


def _calculate_rewards(seconds: float) -> None:  # named as TRL's, so it counts as the rewards part
    CLOCK[0] += 0.001
    warm_up(seconds)


def _profile(seconds: float) -> pstats.Stats:
    profile = cProfile.Profile(lambda: CLOCK[0])
    profile.enable()
    _calculate_rewards(seconds)
    profile.disable()
    return pstats.Stats(profile)


def test_step_one_excess_names_the_function_that_grew(monkeypatch) -> None:
    monkeypatch.setitem(bench.PARTS, "rewards", (Path(__file__).name, "_calculate_rewards"))
    profiles = [_profile(5.0), _profile(1.0), _profile(1.0)]  # warm_up takes 4 s more in step 1
    doc = bench.summarise(profiles, top=3)
    assert doc["first_step_excess"][0]["function"].endswith("(warm_up)")
    assert doc["first_step_excess"][0]["seconds"] == pytest.approx(4.0)
    assert doc["parts"][0]["rewards"] == pytest.approx(5.001) and doc["parts"][1]["rewards"] == pytest.approx(1.001)
    assert doc["parts"][0]["generation"] == 0 and doc["step_seconds"][:2] == pytest.approx([5.001, 1.001])
    doc |= {"torch_threads": 1, "cores": 2, "cpu": "test", "commit": "abc1234", "date": "2026-12-02",
            "load_before": 0.1, "load_after": 0.2}
    table = bench.markdown(doc)
    assert "| rewards | " in table and "| whole step | " in table and "(warm_up)` |" in table
