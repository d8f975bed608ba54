"""Metrics of one instance's proposals (canonical keys, None = unreadable) against its admissible set H_O: validity,
uniqueness, the recovery curves and `score_proposals`, which gathers them. Shared by the recovery evaluation
(`recovery`) and the in-training recovery curve (`recovery_callback`), and free of both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from divrl.core import vendi_score_of_keys
from divrl.core.estimators import expected_coverage_curve, hit_probability_curve, uniform_coverage_ceiling


def validity(proposals: Sequence[str | None], admissible: frozenset[str]) -> float:
    """Fraction of proposals that are admissible, duplicates counted."""
    return sum(p in admissible for p in proposals) / len(proposals) if proposals else 0.0


def uniqueness(proposals: Sequence[str | None]) -> float:
    """Distinct readable proposals / number of proposals (unreadable ones count in N, never as distinct)."""
    return len({p for p in proposals if p is not None}) / len(proposals) if proposals else 0.0


def recovery_curve(proposals: Sequence[str | None], admissible: frozenset[str]) -> list[float]:
    """RR(n) for n = 1..len(proposals): distinct admissible proposals among the first n, over |H_O|."""
    if not admissible:
        raise ValueError("recovery needs a non-empty admissible set")
    found: set[str] = set()
    curve = []
    for proposal in proposals:
        if proposal in admissible:
            found.add(proposal)
        curve.append(len(found) / len(admissible))
    return curve


def score_proposals(proposals: Sequence[str | None], admissible: frozenset[str]) -> dict[str, Any]:
    """Metrics of one instance's N canonical proposals (None = unreadable) against its admissible set H_O.

    `curve`: prefix RR(n) (first n in order); `curve_unbiased`: order-free RR(n); `recovery`: RR@N (the two
    agree there); `recovery_at_n_admissible`: order-free RR@|H_O|, None when N < |H_O|;
    `uniform_ceiling_at_n_admissible`: the RR@|H_O| this validity would give with the valid samples spread evenly
    over H_O (`ceiling_at_n_admissible`), None when N < |H_O|; `pass_at_k`: pass@k of
    validity for k = 1..N; `vendi_valid`: the Vendi score of the valid proposals (the effective number of distinct
    admissible hypotheses among them, exp of their frequencies' entropy); plus validity, uniqueness, `n_samples` and
    `n_admissible`.
    """
    if not proposals:
        raise ValueError("an instance needs at least one proposal")
    n, size = len(proposals), len(admissible)
    curve = recovery_curve(proposals, admissible)
    unbiased = expected_coverage_curve(proposals, admissible)
    valid = sum(p in admissible for p in proposals)
    return {
        "n_admissible": size,
        "n_samples": n,
        "validity": validity(proposals, admissible),
        "uniqueness": uniqueness(proposals),
        "vendi_valid": vendi_score_of_keys([p if p in admissible else None for p in proposals]),
        "recovery": curve[-1],
        "recovery_at_n_admissible": unbiased[size - 1] if size <= n else None,
        "uniform_ceiling_at_n_admissible": ceiling_at_n_admissible(n, valid, size),
        "curve": curve,
        "curve_unbiased": unbiased,
        "pass_at_k": hit_probability_curve(n, valid),
    }


def ceiling_at_n_admissible(samples: int, valid: int, n_admissible: int) -> float | None:
    """The RR@|H_O| an instance's validity (`valid` of `samples`) allows: its valid samples spread evenly over H_O
    (`uniform_coverage_ceiling`; no policy with that validity expects more); None when samples < |H_O|."""
    return uniform_coverage_ceiling(samples, valid, n_admissible, n_admissible) if n_admissible <= samples else None
