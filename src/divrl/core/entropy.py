"""Adaptive entropy coefficient by dual descent toward a target entropy (MaxEnt-GRPO, the execution-rewards paper Eq.
4)."""

from __future__ import annotations

import math
from typing import Any

from divrl.core._groups import check_state_keys


class AdaptiveEntropyCoefficient:
    """alpha* = argmin_{alpha >= 0} alpha (H - H*): step alpha <- max(0, alpha - lr (H - H*)).

    Entropy below target raises alpha (a stronger bonus), above target lowers it toward 0.
    """

    def __init__(self, target: float, lr: float, init_alpha: float = 0.0, max_alpha: float | None = None) -> None:
        if not math.isfinite(target):
            raise ValueError(f"target entropy must be finite, got {target}")
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"entropy controller lr must be finite and > 0, got {lr}")
        if not (math.isfinite(init_alpha) and init_alpha >= 0):
            raise ValueError(f"init_alpha must be finite and >= 0, got {init_alpha}")
        if max_alpha is not None and max_alpha < init_alpha:
            raise ValueError(f"max_alpha ({max_alpha}) must be >= init_alpha ({init_alpha})")
        self.target, self.lr, self.max_alpha = float(target), float(lr), max_alpha
        self.alpha = float(init_alpha)

    def update(self, entropy: float) -> float:
        """One dual-descent step on the measured entropy; returns the new alpha (ValueError on NaN / inf)."""
        entropy = float(entropy)
        if not math.isfinite(entropy):
            raise ValueError(f"measured entropy must be finite, got {entropy}: alpha would become meaningless")
        alpha = max(0.0, self.alpha - self.lr * (entropy - self.target))
        self.alpha = alpha if self.max_alpha is None else min(alpha, self.max_alpha)
        return self.alpha

    def state_dict(self) -> dict[str, Any]:
        """JSON-able controller state."""
        return {"target": self.target, "lr": self.lr, "max_alpha": self.max_alpha, "alpha": self.alpha}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict`."""
        check_state_keys(state, ("target", "lr", "max_alpha", "alpha"), "AdaptiveEntropyCoefficient")
        self.target, self.lr = float(state["target"]), float(state["lr"])
        self.max_alpha, self.alpha = state["max_alpha"], float(state["alpha"])
