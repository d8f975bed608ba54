"""Shared helpers of divrl.core: group-structured batches (contiguous blocks of `group_size` rows), saved states."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch


def check_groups(num_items: int, group_size: int, items: str) -> int:
    """Return the number of groups, or raise a ValueError naming what does not fit (`items`: the argument)."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if num_items % group_size != 0:
        raise ValueError(f"{items}: batch of {num_items} items is not a whole number of groups of "
                         f"group_size={group_size}")
    return num_items // group_size


def as_float_tensor(values: torch.Tensor | Sequence[float], name: str) -> torch.Tensor:
    """Convert `values` (a tensor or a sequence of numbers) to a 1-D float tensor, naming `name` in any error."""
    if torch.is_tensor(values):
        tensor = values
    else:
        try:
            tensor = torch.as_tensor(values, dtype=torch.get_default_dtype())
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"{name} must be a tensor or a sequence of numbers, got {type(values).__name__}: "
                             f"{error}") from None
    if tensor.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor, got shape {tuple(tensor.shape)}")
    return tensor


def check_state_keys(state: Mapping[str, Any], required: Iterable[str], owner: str) -> None:
    """Raise a ValueError naming the keys `state` lacks for `owner`'s load_state_dict."""
    if not isinstance(state, Mapping):
        raise ValueError(f"{owner} state must be a dict, got {type(state).__name__}")
    missing = [key for key in required if key not in state]
    if missing:
        present = ", ".join(map(str, state)) or "none"
        raise ValueError(f"{owner} state is missing key(s) {', '.join(missing)} (has: {present})")
