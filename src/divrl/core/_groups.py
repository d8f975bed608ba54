"""Shared helpers for group-structured batches: groups are contiguous blocks of `group_size` rows."""

from __future__ import annotations

import torch


def check_groups(num_items: int, group_size: int) -> int:
    """Return the number of groups, or raise a ValueError naming what does not fit."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if num_items % group_size != 0:
        raise ValueError(f"batch of {num_items} items is not a whole number of groups of group_size={group_size}")
    return num_items // group_size


def as_float_tensor(values: torch.Tensor | list[float], name: str) -> torch.Tensor:
    """Convert `values` to a 1-D float tensor, naming `name` in the error if it is not 1-D."""
    tensor = torch.as_tensor(values, dtype=torch.get_default_dtype()) if not torch.is_tensor(values) else values
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor, got shape {tuple(tensor.shape)}")
    return tensor
