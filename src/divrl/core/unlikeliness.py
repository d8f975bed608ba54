"""Unlikeliness reward ("Rewarding the Unlikely", He, Fried & Welleck 2025): a correct sample the policy finds
likely earns less than an equally correct one it finds unlikely.

GRPO sharpens: among equally rewarded samples, the likelier ones are reinforced more often, so the policy
collapses onto its initial favourites. The paper ranks a group's samples by their mean per-token log-probability
under the sampling policy (rank 0 = least likely) and multiplies each reward by 1 - beta_rank * rank / G
(their release: `rank_penalty`, 0.25 in its Lean recipe), before GRPO's group normalisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from divrl.core._args import checked
from divrl.core._groups import as_float_tensor, check_groups


@checked
def unlikeliness_factors(sequence_logps: torch.Tensor | Sequence[float], group_size: int, beta: float
                         ) -> torch.Tensor:
    """Reward factor 1 - beta * rank / G per sample, rank = position by mean log-prob inside its group
    (ascending, ties in batch order: the least likely sample keeps its whole reward)."""
    logps = as_float_tensor(sequence_logps, "sequence_logps")
    num_groups = check_groups(logps.numel(), group_size, "sequence_logps")
    if not 0 <= beta <= 1:
        raise ValueError(f"unlikeliness beta must be in [0, 1] (a factor 1 - beta * rank / G stays >= 0), got {beta}")
    if torch.isnan(logps).any():
        raise ValueError("sequence_logps contains NaN: every sample needs its mean log-probability to be ranked")
    grouped = logps.view(num_groups, group_size)
    ranks = grouped.argsort(dim=1, stable=True).argsort(dim=1, stable=True)
    return (1 - beta * ranks.to(logps.dtype) / group_size).reshape(-1)
