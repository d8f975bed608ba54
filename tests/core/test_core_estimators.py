"""The order-free estimator against brute force over every ordering / subset, and its edge cases."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from divrl.core.estimators import (
    expected_coverage_curve,
    hit_probability,
    hit_probability_curve,
    mean_pass_at_k_curve,
    pass_at_k,
    uniform_coverage_ceiling,
)


def _brute_hit(samples: int, hits: int, draws: int) -> Fraction:
    """Exact fraction of `draws`-subsets of the samples that contain a hit."""
    marked = [i < hits for i in range(samples)]
    subsets = list(itertools.combinations(marked, draws))
    return Fraction(sum(any(s) for s in subsets), len(subsets))


@pytest.mark.parametrize("samples", range(1, 8))
def test_hit_probability_equals_enumeration_over_all_subsets(samples: int) -> None:
    for hits in range(samples + 1):
        curve = hit_probability_curve(samples, hits)
        assert len(curve) == samples
        for draws in range(1, samples + 1):
            exact = _brute_hit(samples, hits, draws)
            assert curve[draws - 1] == pytest.approx(float(exact), abs=1e-12)
            assert hit_probability(samples, hits, draws) == pytest.approx(float(exact), abs=1e-12)
            assert pass_at_k(samples, hits, draws) == hit_probability(samples, hits, draws)
            closed = 1 - math.comb(samples - hits, draws) / math.comb(samples, draws)
            assert curve[draws - 1] == pytest.approx(closed, abs=1e-12)


def test_edge_cases() -> None:
    assert hit_probability_curve(5, 0) == [0.0] * 5  # c = 0: never found
    assert hit_probability_curve(5, 5) == [1.0] * 5  # c = N: found by the first draw
    assert hit_probability(6, 1, 6) == 1.0 and hit_probability(6, 2, 5) == 1.0  # n = N, and n > N - c: certain
    assert hit_probability(6, 1, 1) == pytest.approx(1 / 6)  # pass@1 = c / N
    assert hit_probability(4, 2, 0) == 0.0 and hit_probability_curve(4, 2, 0) == []
    assert hit_probability_curve(6, 2, 3) == hit_probability_curve(6, 2)[:3]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((4, 1, 5), r"cannot estimate n = 5 from 4 samples"),
        ((4, 5, 1), r"hits must be in \[0, samples=4\]"),
        ((4, -1, 1), r"hits must be in"),
        ((0, 0, 0), r"samples must be >= 1"),
        ((4, 1, -1), r"n must be in \[0, 4\]"),
        ((4, 1.0, 1), r"hits must be an integer"),
        ((4, True, 1), r"hits must be an integer"),
    ],
)
def test_invalid_arguments_are_clear_errors(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        hit_probability(*args)


def test_large_sample_counts_stay_finite_and_exact() -> None:
    # C(2000, 1000) overflows a float; the product form does not.
    value = hit_probability(2000, 3, 1000)
    assert value == pytest.approx(1 - (1000 * 999 * 998) / (2000 * 1999 * 1998), rel=1e-12)
    assert all(0.0 <= p <= 1.0 for p in hit_probability_curve(2000, 1, 2000))


@pytest.mark.parametrize(
    ("keys", "targets"),
    [
        (["a", "a", "b", None, "c"], {"a", "b", "d"}),  # an invalid sample, a target never sampled
        (["x", "x", "x", "y"], {"x", "y"}),
        ([None, None, "q"], {"q"}),
        (["a", "b", "c", "a", "b", "a"], {"a", "b", "c", "e", "f"}),
    ],
)
def test_expected_coverage_equals_the_mean_prefix_coverage_over_all_orderings(keys: list, targets: set) -> None:
    orders = list(itertools.permutations(keys))
    expected = [
        Fraction(sum(len(set(order[:n]) & targets) for order in orders), len(orders) * len(targets))
        for n in range(1, len(keys) + 1)
    ]
    assert expected_coverage_curve(keys, targets) == pytest.approx([float(e) for e in expected], abs=1e-12)
    assert expected_coverage_curve(keys, targets, up_to=2) == pytest.approx([float(e) for e in expected[:2]])
    # At n = N every ordering has seen every sample: plain coverage.
    assert expected_coverage_curve(keys, targets)[-1] == pytest.approx(len(set(keys) & targets) / len(targets))


def test_expected_coverage_errors() -> None:
    with pytest.raises(ValueError, match="non-empty set of targets"):
        expected_coverage_curve(["a"], set())
    with pytest.raises(ValueError, match="at least one sample"):
        expected_coverage_curve([], {"a"})
    with pytest.raises(ValueError, match="cannot estimate n = 3 from 2 samples"):
        expected_coverage_curve(["a", "b"], {"a"}, up_to=3)


def test_mean_pass_at_k_over_groups() -> None:
    groups = [(4, 1), (3, 0), (5, 5)]
    assert mean_pass_at_k_curve(groups) == pytest.approx(
        [(0.25 + 0 + 1) / 3, (0.5 + 0 + 1) / 3, (0.75 + 0 + 1) / 3]  # up to the smallest group, 3
    )
    assert mean_pass_at_k_curve(groups, up_to=1) == pytest.approx([1.25 / 3])
    with pytest.raises(ValueError, match="cannot estimate n = 4 from 3 samples"):
        mean_pass_at_k_curve(groups, up_to=4)
    with pytest.raises(ValueError, match="at least one group"):
        mean_pass_at_k_curve([])


def _expected(statistic, policy: list[float], samples: int) -> float:
    """Exact expectation of statistic(keys) over `samples` iid draws from `policy` (target index, or None with the
    remaining probability)."""
    outcomes = [*range(len(policy)), None]
    probabilities = [*policy, 1 - sum(policy)]
    total = 0.0
    for draw in itertools.product(range(len(outcomes)), repeat=samples):
        weight = math.prod(probabilities[i] for i in draw)
        total += weight * statistic([outcomes[i] for i in draw])
    return total


@pytest.mark.parametrize("hit_rate", [0.0, 0.3, 0.75, 1.0])
def test_uniform_ceiling_is_unbiased_for_the_even_spread_coverage(hit_rate: float) -> None:
    samples, targets, draws = 6, 3, 4
    expected = sum(math.comb(samples, c) * hit_rate**c * (1 - hit_rate) ** (samples - c)
                   * uniform_coverage_ceiling(samples, c, targets, draws) for c in range(samples + 1))
    assert expected == pytest.approx(1 - (1 - hit_rate / targets) ** draws, abs=1e-12)


@pytest.mark.parametrize("policy", [[0.2, 0.2, 0.2], [0.5, 0.1, 0.0], [0.3, 0.3, 0.0]])
def test_recovery_never_expects_more_than_the_ceiling_and_reaches_it_when_spread_evenly(policy: list[float]) -> None:
    samples, draws, targets = 5, 3, set(range(len(policy)))
    recovery = _expected(lambda keys: expected_coverage_curve(keys, targets, draws)[-1], policy, samples)
    ceiling = _expected(lambda keys: uniform_coverage_ceiling(samples, sum(k is not None for k in keys),
                                                              len(targets), draws), policy, samples)
    assert ceiling == pytest.approx(1 - (1 - sum(policy) / len(targets)) ** draws, abs=1e-12)
    if len(set(policy)) == 1:
        assert recovery == pytest.approx(ceiling, abs=1e-12)
    else:
        assert recovery < ceiling - 0.01


def test_uniform_ceiling_with_one_target_is_the_hit_probability() -> None:
    for hits in range(9):
        assert uniform_coverage_ceiling(8, hits, 1, 5) == pytest.approx(hit_probability(8, hits, 5), abs=1e-12)


@pytest.mark.parametrize(("args", "message"), [((4, 2, 0, 2), "targets must be >= 1"),
                                               ((4, 2, 3, 5), "cannot estimate n = 5"),
                                               ((4, 5, 3, 2), "hits must be in"),
                                               ((4, 2, 1.5, 2), "targets must be an integer")])
def test_uniform_ceiling_errors(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        uniform_coverage_ceiling(*args)
