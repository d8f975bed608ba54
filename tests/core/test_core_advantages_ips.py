"""Group advantages, length-conditional normalisation and inverse probability scaling."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from divrl.core import (
    flat_groups,
    group_advantages,
    group_outcome_frequencies,
    ips_scale,
    ips_scale_exact,
    length_bins,
    length_conditional_advantages,
    without_flat_groups,
)
from divrl.core.ips import distinct_outcomes_per_group

rewards_st = st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=16)


def test_group_advantages_match_hand_computation():
    rewards = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 1.0, 1.0])
    centred = torch.tensor([-1.5, -0.5, 0.5, 1.5, -0.5, -0.5, 0.5, 0.5])
    assert torch.allclose(group_advantages(rewards, 4, "none"), centred)
    std1, std2 = torch.tensor([1.0, 2, 3, 4]).std(), torch.tensor([0.0, 0, 1, 1]).std()
    expected = torch.cat([centred[:4] / (std1 + 1e-4), centred[4:] / (std2 + 1e-4)])
    assert torch.allclose(group_advantages(rewards, 4, "group"), expected)
    assert torch.allclose(group_advantages(rewards, 4, "batch"), centred / (rewards.std() + 1e-4))


def test_group_advantages_reject_bad_input():
    with pytest.raises(ValueError, match="group_size=3"):
        group_advantages(torch.ones(4), 3)
    with pytest.raises(ValueError, match="scale"):
        group_advantages(torch.ones(4), 2, "median")


@given(rewards_st, st.integers(1, 4))
def test_group_advantages_sum_to_zero_per_group(values, group_size):
    rewards = torch.tensor(values * group_size)  # length divisible by group_size
    adv = group_advantages(rewards, group_size, "none").view(-1, group_size)
    assert torch.allclose(adv.sum(dim=1), torch.zeros(adv.shape[0]), atol=1e-4)


def test_fp32_normalisation_of_a_shared_reward_leaves_a_residue_that_flat_groups_remove():
    rewards = torch.tensor([1.2] * 8 + [0.2] * 8 + [1.0] * 8 + [1.2] * 7 + [0.2], dtype=torch.float32)
    advantages = group_advantages(rewards, 8)
    assert advantages[:8].abs().min() > 1e-4  # the residue: every row of the all-1.2 group is pushed, same sign
    assert flat_groups(rewards, 8).tolist() == [True, True, True, False]
    cleaned = without_flat_groups(advantages, rewards, 8)
    assert torch.equal(cleaned[:24], torch.zeros(24)) and torch.equal(cleaned[24:], advantages[24:])


def test_flat_groups_tolerance_is_relative_to_the_reward_scale_and_nan_is_never_flat():
    assert flat_groups([1000.0, 1000.0005], 2).tolist() == [True]  # 5e-4 apart: within 1e-6 of 1000
    assert flat_groups([1.0, 1.0001], 2).tolist() == [False]
    assert flat_groups([1.0, 1.0001], 2, rtol=1e-3).tolist() == [True]
    assert flat_groups([float("nan"), float("nan")], 2).tolist() == [False]
    assert flat_groups([3.0], 1).tolist() == [True]  # a group of one has no spread


def test_flat_group_helpers_name_bad_input():
    with pytest.raises(ValueError, match="rtol"):
        flat_groups([1.0, 1.0], 2, rtol=-1.0)
    with pytest.raises(ValueError, match="group_size=3"):
        flat_groups([1.0, 1.0], 3)
    with pytest.raises(ValueError, match="advantages shape"):
        without_flat_groups(torch.zeros(3), [1.0, 1.0], 2)


def test_length_bins_split_each_group_by_rank():
    lengths = torch.tensor([50.0, 10, 40, 20, 30, 60, 5, 5, 5, 5, 5, 5])
    bins = length_bins(lengths, 6, 3)
    assert bins[:6].tolist() == [2, 0, 1, 0, 1, 2]
    assert len(set(bins[6:].tolist())) == 1  # equal lengths share a bin


def test_equal_lengths_share_a_bin_whatever_their_order():
    # Issue 14.2: the execution-rewards paper bins by complexity percentile, so equal lengths are one bin, never split
    # by position.
    lengths = torch.tensor([3.0, 7, 7, 1, 7, 3, 9, 7])
    bins = length_bins(lengths, 8, 3)
    for value in (3.0, 7.0):
        assert len(set(bins[lengths == value].tolist())) == 1
    assert bins.tolist() == [0, 1, 1, 0, 1, 0, 2, 1]  # mid-ranks 1.5, 4.5 (x4), 0, 1.5, 7 of 0..7
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):  # any order: the same bins, permuted with the items
        order = torch.randperm(8, generator=generator)
        assert torch.equal(length_bins(lengths[order], 8, 3), bins[order])


def test_all_lengths_at_the_cap_is_one_bin_not_position_noise():
    # Issue 14.2: with every completion at the length cap, rewards [1,1,1,0,0,0,0,0] gave all-zero advantages
    # (each position bin was constant) and a reordering of them gave noise. One bin = group normalisation.
    rewards = torch.tensor([1.0, 1, 1, 0, 0, 0, 0, 0])
    capped = torch.full((8,), 512.0)
    adv = length_conditional_advantages(rewards, capped, 8, num_bins=3)
    assert torch.allclose(adv, group_advantages(rewards, 8))
    assert (adv[:3] > 0).all() and (adv[3:] < 0).all()
    order = torch.tensor([3, 0, 4, 5, 1, 6, 2, 7])
    assert torch.allclose(length_conditional_advantages(rewards[order], capped, 8, num_bins=3), adv[order])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_length_conditional_advantages_do_not_depend_on_the_order_within_a_group(scale):
    generator = torch.Generator().manual_seed(1)
    rewards = torch.rand(16, generator=generator)
    lengths = torch.randint(1, 4, (16,), generator=generator).float()  # many ties
    adv = length_conditional_advantages(rewards, lengths, 8, num_bins=3, scale=scale)
    order = torch.cat([torch.randperm(8, generator=generator), 8 + torch.randperm(8, generator=generator)])
    assert torch.allclose(length_conditional_advantages(rewards[order], lengths[order], 8, 3, scale=scale),
                          adv[order], atol=1e-6)


def test_length_conditional_advantages_normalise_within_bins():
    rewards = torch.tensor([1.0, 0.0, 5.0, 3.0])
    lengths = torch.tensor([1.0, 2.0, 10.0, 11.0])  # bin 0: items 0,1 ; bin 1: items 2,3
    adv = length_conditional_advantages(rewards, lengths, 4, num_bins=2)
    low = torch.tensor([1.0, 0.0])
    high = torch.tensor([5.0, 3.0])
    expected = torch.cat([(low - low.mean()) / (low.std() + 1e-4), (high - high.mean()) / (high.std() + 1e-4)])
    assert torch.allclose(adv, expected)


def test_length_conditional_singleton_bin_falls_back_to_group():
    rewards = torch.tensor([1.0, 0.0, 2.0])
    adv = length_conditional_advantages(rewards, torch.tensor([1.0, 2.0, 3.0]), 3, num_bins=3)
    assert torch.allclose(adv, group_advantages(rewards, 3))
    assert torch.isfinite(adv).all()


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_length_conditional_with_one_bin_equals_group_advantages(scale):
    torch.manual_seed(0)
    rewards, lengths = torch.rand(12), torch.randint(1, 50, (12,)).float()
    assert torch.allclose(length_conditional_advantages(rewards, lengths, 4, num_bins=1, scale=scale),
                          group_advantages(rewards, 4, scale))
    with pytest.raises(ValueError, match="scale must be one of"):
        length_conditional_advantages(rewards, lengths, 4, num_bins=1, scale="global")


def test_length_conditional_accepts_sequences_and_names_bad_input():
    rewards, lengths = [1.0, 0.0, 5.0, 3.0], [1, 2, 10, 11]
    expected = length_conditional_advantages(torch.tensor(rewards), torch.tensor(lengths, dtype=torch.float), 4, 2)
    assert torch.allclose(length_conditional_advantages(rewards, lengths, 4, num_bins=2), expected)
    assert torch.allclose(length_conditional_advantages(rewards, tuple(lengths), 4, num_bins=2), expected)
    with pytest.raises(TypeError, match=r"lengths\[0\] must be a number, got str"):
        length_conditional_advantages(rewards, ["a", "b", "c", "d"], 4)
    with pytest.raises(ValueError, match=r"lengths shape \(3,\) != rewards shape \(4,\)"):
        length_conditional_advantages(rewards, [1, 2, 3], 4)


def test_outcome_frequencies_and_none():
    p = group_outcome_frequencies(["a", "a", "b", None], 4)
    assert p[:3].tolist() == [0.5, 0.5, 0.25] and torch.isnan(p[3])


@settings(max_examples=50)
@given(rewards_st)
def test_ips_all_distinct_multiplies_by_group_size(values):
    rewards = torch.tensor(values)
    result = ips_scale(rewards, list(range(len(values))), len(values))
    assert torch.allclose(result.rewards, rewards * len(values))
    assert result.distinct_per_group.tolist() == [len(values)]
    assert distinct_outcomes_per_group(list(range(len(values))), len(values)).tolist() == [len(values)]


def test_distinct_outcomes_per_group_ignores_none():
    keys = ["a", "a", "b", None, None, None, 1, 2, 3]
    assert distinct_outcomes_per_group(keys, 3).tolist() == [2, 0, 3]
    assert ips_scale(torch.ones(9), keys, 3).distinct_per_group.tolist() == [2, 0, 3]


@settings(max_examples=50)
@given(rewards_st)
def test_ips_identical_outcomes_leave_rewards_unchanged(values):
    rewards = torch.tensor(values)
    assert torch.allclose(ips_scale(rewards, ["same"] * len(values), len(values)).rewards, rewards)


def test_ips_mixed_group_with_invalid_items():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 2.0, 2.0])
    result = ips_scale(rewards, ["x", "x", "y", None, "z", "z"], 3, epsilon=0.5)
    # group 1: x twice (p=2/3 -> x1.5), y once (p=1/3 floored at 0.5 -> x2); group 2: None kept, z p=2/3
    assert torch.allclose(result.rewards, torch.tensor([1.5, 1.5, 2.0, 0.0, 3.0, 3.0]))
    assert result.max_scale == pytest.approx(2.0)


def test_ips_rejects_bad_epsilon_and_lengths():
    with pytest.raises(ValueError, match="epsilon"):
        ips_scale(torch.ones(2), ["a", "b"], 2, epsilon=0.0)
    with pytest.raises(ValueError, match="outcome keys"):
        ips_scale(torch.ones(2), ["a"], 1)


def test_ips_exact_divides_by_floored_probability():
    rewards, probs = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 0.25, 0.0])
    assert torch.allclose(ips_scale_exact(rewards, probs, epsilon=0.1), torch.tensor([2.0, 8.0, 30.0]))


def test_masked_mean_averages_only_the_masked_positions_and_gives_0_for_none() -> None:
    from divrl.core import masked_mean

    values = torch.tensor([[1.0, 2.0, 9.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    assert masked_mean(values, mask, 1).tolist() == [1.5, 5.0, 0.0]
    hidden = values.unsqueeze(-1).expand(3, 3, 2)  # (B, T, H) pooled with a (B, T, 1) mask
    assert masked_mean(hidden, mask.unsqueeze(-1), 1).tolist() == [[1.5, 1.5], [5.0, 5.0], [0.0, 0.0]]


def test_flat_rows_marks_every_row_of_a_flat_group() -> None:
    from divrl.core import flat_rows

    assert flat_rows(torch.tensor([1.2, 1.2, 0.0, 1.0]), 2).tolist() == [True, True, False, False]
