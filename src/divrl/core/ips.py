"""Inverse probability scaling (the IPS paper, Eq. 9): divide each reward by its outcome's probability.

Under expected-return gradients the likelier of two equally good outcomes grows faster and the policy
collapses; scaling r(o) by 1 / p(o) makes the stationary policy p(o) proportional to r(o). With an
LLM p(o) is unknown, so it is estimated by the outcome's frequency inside its group of G samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

from divrl.core._args import checked
from divrl.core._groups import as_float_tensor, check_groups


@dataclass(frozen=True)
class IPSResult:
    """Scaled rewards plus the statistics the trainers log."""

    rewards: torch.Tensor  # scaled rewards; items without an outcome keep their reward
    p_hat: torch.Tensor  # estimated outcome probability per item (NaN where the key is None)
    distinct_per_group: torch.Tensor  # number of distinct valid outcomes in each group
    max_scale: float  # largest factor 1 / max(p_hat, epsilon) applied in the batch (1.0 if none)


def _check_epsilon(epsilon: float) -> None:
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0 (it floors the probability in 1 / max(p, epsilon)), got {epsilon}")


def _group_counts(keys: Sequence[Hashable | None], group_size: int) -> list[Counter]:
    """Counts of each valid (non-None) outcome key inside each group."""
    num_groups = check_groups(len(keys), group_size, "keys")
    return [
        Counter(key for key in keys[g * group_size : (g + 1) * group_size] if key is not None)
        for g in range(num_groups)
    ]


@checked
def distinct_outcomes_per_group(keys: Sequence[Hashable | None], group_size: int) -> torch.Tensor:
    """Number of distinct valid (non-None) outcome keys in each group (long, one entry per group).

    Group-frequency IPS only reweights when outcomes repeat: with all G outcomes of a group distinct,
    every reward is multiplied by the same G and group-std normalisation cancels it.
    """
    return torch.tensor([len(c) for c in _group_counts(keys, group_size)], dtype=torch.long)


@checked
def group_outcome_frequencies(keys: Sequence[Hashable | None], group_size: int) -> torch.Tensor:
    """p_hat(o) = (count of o in the item's group) / G for every item; NaN where the key is None."""
    counts = _group_counts(keys, group_size)
    return torch.tensor(
        [float("nan") if key is None else counts[i // group_size][key] / group_size for i, key in enumerate(keys)]
    )


@checked
def ips_scale(
    rewards: torch.Tensor, keys: Sequence[Hashable | None], group_size: int, epsilon: float = 1e-3
) -> IPSResult:
    """Scale rewards by 1 / max(p_hat, epsilon) with p_hat the group frequency of each outcome key.

    `None` keys mean "no valid outcome": those rewards are left unchanged. No gradient flows through
    p_hat (it is a count). A group of G distinct outcomes multiplies every reward by G; a group of one
    repeated outcome leaves rewards unchanged.
    """
    _check_epsilon(epsilon)
    rewards = as_float_tensor(rewards, "rewards")
    if rewards.numel() != len(keys):
        raise ValueError(f"got {rewards.numel()} rewards but {len(keys)} outcome keys")
    p_hat = group_outcome_frequencies(keys, group_size)
    valid = ~torch.isnan(p_hat)
    scale = torch.where(valid, 1.0 / p_hat.nan_to_num(1.0).clamp(min=epsilon), torch.ones_like(p_hat))
    distinct = distinct_outcomes_per_group(keys, group_size)
    max_scale = float(scale.max()) if scale.numel() else 1.0
    return IPSResult(rewards=rewards * scale.to(rewards.dtype), p_hat=p_hat, distinct_per_group=distinct,
                     max_scale=max_scale)


@checked
def ips_scale_exact(rewards: torch.Tensor, probs: torch.Tensor, epsilon: float = 1e-3) -> torch.Tensor:
    """Scale rewards by 1 / max(p, epsilon) with each outcome's exact probability p (toy policies).

    `probs` is detached: the scaling is a constant weight, not part of the gradient.
    """
    _check_epsilon(epsilon)
    if rewards.shape != probs.shape:
        raise ValueError(f"rewards shape {tuple(rewards.shape)} != probs shape {tuple(probs.shape)}")
    return rewards / probs.detach().clamp(min=epsilon)
