"""Pass@k objectives: advantages that train for the best of k samples instead of the average sample.

Pass@k Training (Chen et al. 2025, "Pass@k Training for Adaptively Balancing Exploration and Exploitation of
Large Reasoning Models"): draw every k-subset of a group of N samples, give each subset the reward of its best
member (pass@k for 0/1 rewards, max@k otherwise), normalise subset rewards over the subsets, and give each
sample the mean advantage of the subsets that contain it. The paper derives this in closed form for 0/1
rewards; below is the same closed form for any reward (sorted ranks), which reduces to theirs on 0/1 rewards:

    mu = sum_i C(i-1, k-1) / C(N, k) r_(i)           (r_(1) <= ... <= r_(N): mean subset maximum)
    m_i = [C(i-1, k-1) r_(i) + sum_{j>i} C(j-2, k-2) r_(j)] / C(N-1, k-1)   (mean maximum of subsets holding i)
    A_i = (m_i - mu) / (sigma + eps),   sigma = std of the subset maxima.

A sample that is not the best of its subsets earns only through the subsets it shares with better samples, so
the gradient stops sharpening a group that already solves the prompt at k and pushes mass to the samples that
would be missing. k = 1 is GRPO with the population std.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from divrl.core._args import checked
from divrl.core._groups import as_float_tensor, check_groups


def _log_comb(n: torch.Tensor, r: int) -> torch.Tensor:
    """log C(n, r) elementwise for float n (-inf where n < r or r < 0)."""
    if r < 0:
        return torch.full_like(n, -torch.inf)
    valid = n >= r
    safe = torch.where(valid, n, torch.full_like(n, float(r)))
    value = torch.lgamma(safe + 1) - torch.lgamma(torch.tensor(r + 1.0, dtype=n.dtype)) - torch.lgamma(safe - r + 1)
    return torch.where(valid, value, torch.full_like(n, -torch.inf))


@checked
def passk_advantages(
    rewards: torch.Tensor | Sequence[float], group_size: int, k: int, scale: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """Per-sample advantages of the best-of-k objective (Pass@k Training's bootstrap, in closed form).

    `rewards` holds contiguous groups of `group_size`; `scale` divides by the std of the subset maxima (the
    paper's normalisation; False only centres). Exact for any real rewards and ties; O(N log N) per group. A NaN
    reward (an unscorable sample) is left out of its group's subsets and gets advantage 0; the others are those of
    their group without it (k capped at the samples left).
    """
    rewards = as_float_tensor(rewards, "rewards")
    num_groups = check_groups(rewards.numel(), group_size, "rewards")
    if not 1 <= k <= group_size:
        raise ValueError(f"pass@k needs 1 <= k <= group_size, got k={k} with group_size={group_size}")
    if torch.isnan(rewards).any():
        groups = rewards.detach().view(num_groups, group_size)
        advantages = torch.zeros_like(groups)
        for group, row in zip(advantages, groups, strict=True):
            scored = ~torch.isnan(row)
            if scored.any():
                left = int(scored.sum())
                group[scored] = passk_advantages(row[scored], left, min(k, left), scale, eps)
        return advantages.reshape(-1)
    values = rewards.detach().double().view(num_groups, group_size)
    sorted_values, order = values.sort(dim=1, stable=True)
    position = torch.arange(1, group_size + 1, dtype=torch.float64)  # 1-based sorted rank
    log_total = _log_comb(torch.tensor(float(group_size), dtype=torch.float64), k)
    max_weight = torch.exp(_log_comb(position - 1, k - 1) - log_total)  # P(subset max is rank i)
    mean = (max_weight * sorted_values).sum(dim=1, keepdim=True)
    second = (max_weight * sorted_values**2).sum(dim=1, keepdim=True)
    std = (second - mean**2).clamp(min=0).sqrt()
    log_holding = _log_comb(torch.tensor(float(group_size - 1), dtype=torch.float64), k - 1)
    as_max = torch.exp(_log_comb(position - 1, k - 1) - log_holding) * sorted_values
    # Sum over j > i of C(j-2, k-2) r_(j) / C(N-1, k-1): reversed cumulative sum, shifted by one.
    above = torch.exp(_log_comb(position - 2, k - 2) - log_holding) * sorted_values
    tail = above.flip(1).cumsum(1).flip(1)
    tail = torch.cat([tail[:, 1:], torch.zeros(num_groups, 1, dtype=torch.float64)], dim=1)
    sorted_advantages = as_max + tail - mean
    if scale:
        sorted_advantages = sorted_advantages / (std + eps)
    advantages = torch.empty_like(sorted_advantages).scatter_(1, order, sorted_advantages)
    return advantages.reshape(-1).to(rewards.dtype)

