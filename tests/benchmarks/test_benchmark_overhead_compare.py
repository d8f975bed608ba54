"""benchmarks/micro/overhead_compare.py: a method counts as slower after a change only when its after ratio lies above
the interval of its before ratio."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "micro"))

import overhead_compare as bench  # noqa: E402


def _run(ratios: dict[str, tuple[float, float, float]]) -> dict:
    return {"rows": [{"trainer": name, "baseline": "vanilla",
                      "cpu": {"ratio": ratio, "ci95": [low, high]}} for name, (ratio, low, high) in ratios.items()]}


def test_slower_only_above_the_before_interval() -> None:
    before = _run({"ips": (0.86, 0.80, 0.93), "qd": (0.80, 0.75, 0.84), "gone": (1.0, 0.9, 1.1)})
    after = _run({"ips": (0.92, 0.85, 0.99), "qd": (0.85, 0.80, 0.90), "new": (1.0, 0.9, 1.1)})
    rows = {row["trainer"]: row for row in bench.compare(before, after)}
    assert set(rows) == {"ips", "qd"}  # only trainers both runs timed
    assert not rows["ips"]["after_above_before_interval"] and rows["qd"]["after_above_before_interval"]
    assert abs(rows["qd"]["change"] - 0.85 / 0.80) < 1e-12
