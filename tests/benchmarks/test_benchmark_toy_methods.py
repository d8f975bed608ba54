"""The methods x toys benchmark: Student-t intervals and issue 15's claims judged on them."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "toy"))

import toy_methods as bench  # noqa: E402
from intervals import t_interval  # noqa: E402


def test_interval_uses_the_student_t_quantile_for_any_seed_count() -> None:
    stats = t_interval(np.array([1.0, 2.0, 3.0]))
    assert stats["mean"] == 2.0 and stats["ci_high"] - 2.0 == pytest.approx(4.3027 * 1.0 / np.sqrt(3), rel=1e-4)
    wide = t_interval(np.arange(31.0))  # 30 degrees of freedom: t = 2.0423
    assert wide["ci_high"] - 15.0 == pytest.approx(2.0423 * np.arange(31.0).std(ddof=1) / np.sqrt(31), rel=1e-4)
    assert np.isnan(t_interval(np.array([1.0]))["ci_low"])  # one seed: no interval


def _row(modes: tuple[float, float], l1: tuple[float, float]) -> dict:
    return {"modes": {"ci_low": modes[0], "ci_high": modes[1]},
            "l1_to_target": {"mean": sum(l1) / 2, "ci_high": l1[1]}}


def test_claims_pass_or_fail_on_the_intervals() -> None:
    results = {"envs": {"bandit-equal": {"grpo": _row((1, 2), (0.9, 1.2)), "unlikely": _row((3, 3), (0.0, 0.04))},
                        "hypergrid": {"grpo": _row((1, 1), (1.7, 1.8)), "clipcov": _row((1, 2), (1.6, 1.8)),
                                      "grpo-2updates": _row((1, 1), (1.7, 1.8)), "klcov": _row((2, 3), (1.0, 1.2))}},
               "early_passk": {"passk_minus_grpo": {"ci_low": -0.01}}}
    verdicts = dict((text.split(" ")[0], passed) for text, passed in bench.claims(results))
    assert verdicts == {"unlikeliness": True, "pass@k": False, "clipcov": False, "klcov": True}
    results["envs"]["bandit-equal"]["unlikely"] = _row((3, 3), (0.0, 0.06))  # the interval reaches above 0.05
    assert not bench.claims(results)[0][1]
    # KL-Cov is judged against GRPO with the same 2 updates per batch
    results["envs"]["hypergrid"]["grpo-2updates"] = _row((2, 3), (1.0, 1.2))
    assert dict((text.split(" ")[0], passed) for text, passed in bench.claims(results))["klcov"] is False
    assert bench.claims({"envs": {}}) == []  # nothing run yet: nothing judged
