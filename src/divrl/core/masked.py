"""Masked means: one formula for per-sequence token means and pooled hidden states."""

from __future__ import annotations

import torch

from divrl.core._args import checked


@checked
def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean of `values` over `dim` where `mask` is non-zero (0 where nothing is): `mask` broadcasts against
    `values`, e.g. (B, T) token log-probs with a (B, T) completion mask, or (B, T, H) hidden states with (B, T, 1)."""
    try:
        torch.broadcast_shapes(values.shape, mask.shape)
    except RuntimeError:
        raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast against values of shape "
                         f"{tuple(values.shape)}") from None
    weights = mask.to(values.dtype)
    return (values * weights).sum(dim) / weights.sum(dim).clamp(min=1.0)
