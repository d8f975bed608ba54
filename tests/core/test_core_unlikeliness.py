"""Unlikeliness factors: 1 - beta * rank / G, rank by mean log-prob inside each group."""

from __future__ import annotations

import pytest
import torch

from divrl.core import unlikeliness_factors


def test_the_least_likely_sample_keeps_its_reward_and_the_likeliest_loses_most() -> None:
    factors = unlikeliness_factors([-1.0, -3.0, -2.0, -0.5, -0.1, -0.2, -0.3, -0.4], 4, 0.25)
    assert factors.tolist() == pytest.approx([0.875, 1.0, 0.9375, 0.8125, 0.8125, 0.875, 0.9375, 1.0])


def test_ties_are_ranked_in_batch_order() -> None:
    assert unlikeliness_factors(torch.zeros(4), 4, 0.5).tolist() == pytest.approx([1.0, 0.875, 0.75, 0.625])


def test_beta_zero_changes_nothing() -> None:
    assert unlikeliness_factors(torch.randn(6), 3, 0.0).tolist() == [1.0] * 6


@pytest.mark.parametrize(("values", "beta", "match"), [([0.0, 0.0], 1.5, "beta"), ([0.0, float("nan")], 0.2, "NaN"),
                                                       ([0.0, 1.0, 2.0], 0.2, "whole number of groups")])
def test_bad_input_is_refused(values: list[float], beta: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        unlikeliness_factors(values, 2, beta)
