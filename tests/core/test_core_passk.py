"""Pass@k advantages: the closed form equals the bootstrap over every k-subset it replaces."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from divrl.core import passk_advantages


def _bootstrap(rewards: list[float], k: int) -> list[float]:
    """Pass@k Training's definition: every k-subset scored by its best reward, normalised over the subsets;
    a sample's advantage is the mean over the subsets that hold it."""
    subsets = list(itertools.combinations(range(len(rewards)), k))
    best = torch.tensor([max(rewards[i] for i in s) for s in subsets], dtype=torch.float64)
    normalised = (best - best.mean()) / (best.std(unbiased=False) + 1e-4)
    return [normalised[[j for j, s in enumerate(subsets) if i in s]].mean().item() for i in range(len(rewards))]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_closed_form_equals_the_subset_bootstrap(k: int) -> None:
    rewards = [0.0, 1.0, 0.5, 0.5, 2.0, 0.0, 1.0]  # ties included
    assert passk_advantages(torch.tensor(rewards), 7, k).tolist() == pytest.approx(_bootstrap(rewards, k), abs=1e-5)


def test_binary_rewards_give_the_papers_analytical_advantages() -> None:
    # Chen et al. 2025: R = 1 - C(N_neg, k) / C(N, k), A_pos = (1 - R) / sigma,
    # A_neg = (1 - R - C(N_neg - 1, k - 1) / C(N - 1, k - 1)) / sigma, sigma = sqrt(R (1 - R)).
    n, k, rewards = 8, 3, [1.0, 0, 0, 1, 0, 0, 0, 0]
    negatives = rewards.count(0)
    mean = 1 - math.comb(negatives, k) / math.comb(n, k)
    sigma = math.sqrt(mean * (1 - mean))
    positive = (1 - mean) / (sigma + 1e-4)
    negative = (1 - mean - math.comb(negatives - 1, k - 1) / math.comb(n - 1, k - 1)) / (sigma + 1e-4)
    expected = [positive if r else negative for r in rewards]
    assert passk_advantages(rewards, n, k).tolist() == pytest.approx(expected, rel=1e-6)


def test_groups_are_independent_and_a_solved_group_teaches_nothing() -> None:
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    both = passk_advantages(rewards, 4, 2)
    assert both[:4].tolist() == pytest.approx(passk_advantages(rewards[:4], 4, 2).tolist())
    assert both[4:].tolist() == pytest.approx(passk_advantages(rewards[4:], 4, 2).tolist())
    # with k = 3 every 3-subset of [1, 1, 0, 1] holds a 1: pass@3 is already 1, nothing to push
    assert passk_advantages(rewards[:4], 4, 3).tolist() == pytest.approx([0.0] * 4, abs=1e-9)


def test_k_one_is_grpo_with_the_population_std() -> None:
    rewards = torch.tensor([0.0, 1.0, 3.0, 4.0])
    expected = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-4)
    assert passk_advantages(rewards, 4, 1).tolist() == pytest.approx(expected.tolist(), rel=1e-6)
    assert passk_advantages(rewards, 4, 1, scale=False).tolist() == pytest.approx((rewards - 2).tolist())


def test_large_groups_stay_finite() -> None:
    rewards = torch.rand(128, generator=torch.Generator().manual_seed(0))
    advantages = passk_advantages(rewards, 128, 64)
    assert torch.isfinite(advantages).all() and advantages.abs().sum() > 0


@pytest.mark.parametrize(("k", "size"), [(0, 4), (5, 4)])
def test_k_outside_the_group_is_refused(k: int, size: int) -> None:
    with pytest.raises(ValueError, match="1 <= k <= group_size"):
        passk_advantages([0.0] * size, size, k)



def test_a_nan_reward_is_left_out_of_its_group_not_spread_over_it() -> None:
    nan = float("nan")
    rewards = torch.tensor([1.0, 0.0, nan, 0.0, 0.0, 1.0, 0.0, 1.0])
    advantages = passk_advantages(rewards, 4, 2)
    assert torch.isfinite(advantages).all() and advantages[2] == 0.0
    assert torch.equal(advantages[[0, 1, 3]], passk_advantages(torch.tensor([1.0, 0.0, 0.0]), 3, 2))
    assert torch.equal(advantages[4:], passk_advantages(rewards[4:], 4, 2))  # the other group is untouched
    assert torch.equal(passk_advantages(torch.full((4,), nan), 4, 2), torch.zeros(4))
