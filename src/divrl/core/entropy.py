"""Adaptive entropy coefficient by dual descent toward a target entropy (MaxEnt-GRPO, the execution-rewards paper Eq.
4), with an optional target measured on the policy itself (`target=None`: divrl's `auto`)."""

from __future__ import annotations

import math
from typing import Any

from divrl.core._groups import check_state_keys

# "Far below target": entropy at most H* - FAR_BELOW |H*| (half the target for a positive one).
FAR_BELOW = 0.5


def far_below(entropy: float, target: float) -> bool:
    """Whether `entropy` is far below `target` (at most H* - FAR_BELOW |H*|)."""
    return entropy <= target - FAR_BELOW * abs(target)


class EntropyTargetMeasurement:
    """divrl's `auto` target: H* = `scale` x the mean entropy of the first `steps` measurements."""

    def __init__(self, scale: float = 1.0, steps: int = 1) -> None:
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"auto_scale must be finite and > 0, got {scale}")
        if steps < 1:
            raise ValueError(f"auto_steps must be >= 1, got {steps}")
        self.record: dict[str, float] = {"scale": float(scale), "steps": int(steps), "entropy_sum": 0.0,
                                         "measured": 0}

    def add(self, entropy: float) -> float | None:
        """Record one measurement; returns H* when it was the last of `steps`, else None."""
        record = self.record
        if record["measured"] >= record["steps"]:
            raise ValueError("the entropy target is already measured")
        record["entropy_sum"] += float(entropy)
        record["measured"] += 1
        if record["measured"] < record["steps"]:
            return None
        return record["scale"] * record["entropy_sum"] / record["steps"]

    def state_dict(self) -> dict[str, float]:
        """JSON-able record: scale, steps, entropy sum and measurements so far."""
        return dict(self.record)

    @classmethod
    def from_state(cls, state: dict[str, float]) -> EntropyTargetMeasurement:
        """The measurement a `state_dict` describes."""
        check_state_keys(state, ("scale", "steps", "entropy_sum", "measured"), "EntropyTargetMeasurement")
        measurement = cls(state["scale"], int(state["steps"]))
        measurement.record = dict(state)
        return measurement


class AdaptiveEntropyCoefficient:
    """alpha* = argmin_{alpha >= 0} alpha (H - H*): step alpha <- max(0, alpha - lr (H - H*)), capped at max_alpha.

    Entropy below target raises alpha (a stronger bonus), above target lowers it toward 0.
    `target=None` measures it: the first `auto_steps` updates only record the entropy (alpha stays at its initial
    value), then H* = `auto_scale` x their mean, i.e. the policy holds (a multiple of) its starting entropy.
    `far_below_steps` counts the latest updates in a row whose entropy was far below the target (at most
    H* - |H*| / 2), each of which raised alpha or left it at its cap; it is not checkpointed.
    """

    def __init__(self, target: float | None, lr: float, init_alpha: float = 0.0, max_alpha: float | None = None,
                 auto_scale: float = 1.0, auto_steps: int = 1) -> None:
        if target is not None and not math.isfinite(target):
            raise ValueError(f"target entropy must be finite, got {target}")
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"entropy controller lr must be finite and > 0, got {lr}")
        if not (math.isfinite(init_alpha) and init_alpha >= 0):
            raise ValueError(f"init_alpha must be finite and >= 0, got {init_alpha}")
        if max_alpha is not None and max_alpha < init_alpha:
            raise ValueError(f"max_alpha ({max_alpha}) must be >= init_alpha ({init_alpha})")
        self.target, self.lr, self.max_alpha = None if target is None else float(target), float(lr), max_alpha
        self.alpha = float(init_alpha)
        # Measuring the target (target=None); kept after it is measured, for the checkpoint.
        self.auto = None if target is not None else EntropyTargetMeasurement(auto_scale, auto_steps)
        self.far_below_steps = 0

    def update(self, entropy: float) -> float:
        """One dual-descent step on the measured entropy (or one measurement while the target is being measured);
        returns the new alpha (ValueError on NaN / inf)."""
        entropy = float(entropy)
        if not math.isfinite(entropy):
            raise ValueError(f"measured entropy must be finite, got {entropy}: alpha would become meaningless")
        if self.target is None:
            assert self.auto is not None
            self.target = self.auto.add(entropy)
            return self.alpha
        alpha = self._step(entropy, self.target)
        self.alpha = alpha if self.max_alpha is None else min(alpha, self.max_alpha)
        self.far_below_steps = self.far_below_steps + 1 if far_below(entropy, self.target) else 0
        return self.alpha

    def _step(self, entropy: float, target: float) -> float:
        """The next alpha before the cap: the dual-descent step (a subclass may swap the rule)."""
        return max(0.0, self.alpha - self.lr * (entropy - target))

    @property
    def coefficient(self) -> float:
        """The entropy-bonus coefficient the next loss applies: alpha."""
        return self.alpha

    def state_dict(self) -> dict[str, Any]:
        """JSON-able controller state (`auto` only for a measured target)."""
        state: dict[str, Any] = {"target": self.target, "lr": self.lr, "max_alpha": self.max_alpha,
                                 "alpha": self.alpha}
        if self.auto is not None:
            state["auto"] = self.auto.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict`."""
        check_state_keys(state, ("target", "lr", "max_alpha", "alpha"), "AdaptiveEntropyCoefficient")
        target = state["target"]
        self.target, self.lr = None if target is None else float(target), float(state["lr"])
        self.max_alpha, self.alpha = state["max_alpha"], float(state["alpha"])
        self.auto = EntropyTargetMeasurement.from_state(state["auto"]) if state.get("auto") is not None else None
        if self.target is None and self.auto is None:
            raise ValueError("AdaptiveEntropyCoefficient state has no target and no 'auto' measurement")
