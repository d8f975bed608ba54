"""Logging a masked mean over the global batch: every process's sums and counts reduced, then divided, once."""

from __future__ import annotations

from typing import Any

import torch


def log_global_means(accelerator: Any, metrics: dict[str, list], sums: dict[str, torch.Tensor],
                     count: torch.Tensor) -> None:
    """Append to `metrics[name]` each value's sum over all processes divided by `count`'s (at least 1)."""
    totals = accelerator.reduce(torch.stack([*sums.values(), count]).detach().float(), reduction="sum")
    for name, total in zip(sums, totals[:-1], strict=True):
        metrics[name].append((total / totals[-1].clamp(min=1.0)).item())
