"""Group-relative advantages (GRPO) and length-conditional advantage normalisation (the execution-rewards paper, Eq.
6)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from divrl.core._args import checked
from divrl.core._groups import as_float_tensor, check_groups

RewardScaling = Literal["group", "batch", "none"]


@checked
def group_advantages(
    rewards: torch.Tensor | Sequence[float], group_size: int, scale: RewardScaling = "group", eps: float = 1e-4
) -> torch.Tensor:
    """(r - group mean), divided by the group std ("group"), the batch std ("batch") or nothing ("none").

    Same convention as TRL's GRPOTrainer: unbiased std, `eps` added to the std.
    """
    rewards = as_float_tensor(rewards, "rewards")
    num_groups = check_groups(rewards.numel(), group_size, "rewards")
    grouped = rewards.view(num_groups, group_size)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)
    if scale == "none":
        return advantages
    if scale == "group":
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros(num_groups, 1)
        return advantages / (std.expand(-1, group_size).reshape(-1) + eps)
    if scale == "batch":
        std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())
        return advantages / (std + eps)
    raise ValueError(f"scale must be one of 'group', 'batch', 'none'; got {scale!r}")


@checked
def flat_groups(rewards: torch.Tensor | Sequence[float], group_size: int, rtol: float = 1e-6) -> torch.Tensor:
    """Boolean mask (one entry per group) of the groups whose rewards are all equal: max - min within `rtol` of
    the largest |reward| (at least 1). Such a group carries no signal, yet fp32 normalisation does not give it
    advantage 0: eight rewards of 1.2 have a mean one ulp off and a std of ~1e-7, so (r - mean) / (std + 1e-4)
    is ~1e-3 for every completion (TRL's `isclose(std, 0)` misses it too). A group holding a NaN is not flat."""
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, got {rtol}")
    rewards = as_float_tensor(rewards, "rewards")
    grouped = rewards.view(check_groups(rewards.numel(), group_size, "rewards"), group_size)
    spread = grouped.amax(dim=1) - grouped.amin(dim=1)
    return spread <= rtol * grouped.abs().amax(dim=1).clamp(min=1.0)


@checked
def flat_rows(rewards: torch.Tensor | Sequence[float], group_size: int, rtol: float = 1e-6) -> torch.Tensor:
    """(N,) bool: whether each row belongs to a flat group (`flat_groups`, repeated over the group's rows)."""
    return flat_groups(rewards, group_size, rtol).repeat_interleave(group_size)


@checked
def without_flat_groups(advantages: torch.Tensor, rewards: torch.Tensor | Sequence[float], group_size: int,
                        rtol: float = 1e-6) -> torch.Tensor:
    """`advantages` with every row of a flat group (see `flat_groups`) set to exactly 0."""
    flat = flat_rows(rewards, group_size, rtol)
    if flat.shape != advantages.shape:
        raise ValueError(f"advantages shape {tuple(advantages.shape)} != rewards shape {tuple(flat.shape)}")
    return advantages.masked_fill(flat.to(advantages.device), 0.0)


@checked
def length_bins(lengths: torch.Tensor | Sequence[float], group_size: int, num_bins: int) -> torch.Tensor:
    """Bin index in [0, num_bins) of each item by its length percentile inside its group (the execution-rewards paper:
    "bins by
    complexity percentile").

    The percentile is the mid-rank, (items shorter + (items of equal length - 1) / 2) / group_size, so equal
    lengths always share a bin (a bin is a set of lengths, never a set of positions) and the bins do not
    depend on the order of the group. Without ties the L bins hold floor or ceil of G / L items each; ties
    make bins uneven, and a group whose lengths are all equal (e.g. every completion at the length cap) is
    one bin, i.e. plain group normalisation.
    """
    lengths = as_float_tensor(lengths, "lengths")
    if not torch.isfinite(lengths).all():
        raise ValueError(f"lengths must be finite (token counts), got {lengths.tolist()}")
    num_groups = check_groups(lengths.numel(), group_size, "lengths")
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    grouped = lengths.view(num_groups, group_size)
    shorter = (grouped[:, None, :] < grouped[:, :, None]).sum(dim=2)  # (groups, G): items shorter than item i
    equal = (grouped[:, None, :] == grouped[:, :, None]).sum(dim=2)  # including item i itself
    twice_mid_rank = 2 * shorter + equal - 1  # integer arithmetic: exact bin edges
    return (twice_mid_rank * num_bins // (2 * group_size)).reshape(-1)


@checked
def length_conditional_advantages(
    rewards: torch.Tensor | Sequence[float],
    lengths: torch.Tensor | Sequence[float],
    group_size: int,
    num_bins: int = 3,
    eps: float = 1e-4,
    scale: RewardScaling = "group",
) -> torch.Tensor:
    """Normalise rewards within length bins of each group (the execution-rewards paper, Eq. 6).

    A_i = (R_i - mean_bin) / (std_bin + eps), so long (complex) completions compete only with
    completions of similar length. A bin with a single item has no spread to compare against: its
    advantage falls back to the whole group's normalisation, rather than a meaningless 0.
    `scale` mirrors TRL's `scale_rewards`: "group" divides by the bin's std (Eq. 6), "batch" by the std
    of the whole batch, "none" only centres within the bin.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be one of 'group', 'batch', 'none'; got {scale!r}")
    rewards = as_float_tensor(rewards, "rewards")
    lengths = as_float_tensor(lengths, "lengths")
    if lengths.shape != rewards.shape:
        raise ValueError(f"lengths shape {tuple(lengths.shape)} != rewards shape {tuple(rewards.shape)}")
    num_groups = check_groups(rewards.numel(), group_size, "rewards")
    bins = length_bins(lengths, group_size, num_bins)
    # Segment id = group * num_bins + bin: one scatter pass computes every bin's statistics.
    segment = torch.arange(num_groups).repeat_interleave(group_size) * num_bins + bins
    num_segments = num_groups * num_bins
    count = torch.zeros(num_segments).index_add_(0, segment, torch.ones_like(rewards))
    total = torch.zeros(num_segments).index_add_(0, segment, rewards)
    mean = total / count.clamp(min=1)
    sq_dev = torch.zeros(num_segments).index_add_(0, segment, (rewards - mean[segment]) ** 2)
    std = torch.sqrt(sq_dev / (count - 1).clamp(min=1))
    centred = rewards - mean[segment]
    if scale == "group":
        binned = centred / (std[segment] + eps)
    elif scale == "batch":
        binned = centred / ((rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())) + eps)
    else:
        binned = centred
    singleton = count[segment] < 2
    if singleton.any():
        binned = torch.where(singleton, group_advantages(rewards, group_size, scale, eps), binned)
    return binned
