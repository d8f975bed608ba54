"""TRL's own adaptive entropy controller (`use_adaptive_entropy`, Skywork-OR1), mirrored for the toy policies so that
benchmarks can put it beside MaxEnt's dual descent. The rule is TRL 1.16's `GRPOTrainer._compute_loss`; the defaults
are `GRPOConfig`'s (tests/test_toy_runner.py checks them against the installed TRL)."""

from __future__ import annotations

import math

from divrl.core import AdaptiveEntropyCoefficient

# GRPOConfig defaults of TRL 1.16: entropy_coef (the initial coefficient), entropy_coef_delta / _min / _max.
TRL_ENTROPY_COEF = 0.0
TRL_ENTROPY_COEF_DELTA = 0.005
TRL_ENTROPY_COEF_MIN = 0.0
TRL_ENTROPY_COEF_MAX = 1.0


class TRLAdaptiveEntropy(AdaptiveEntropyCoefficient):
    """After each optimizer step: coef <- min(coef + delta, max) if H <= target, else max(coef - delta, min).
    The loss applies coef only while the previous step's entropy was at or below the target (0 before the first
    measurement). `target=None` measures the target as `AdaptiveEntropyCoefficient` does (divrl's `auto`; TRL has
    none: the toy uses it to compare both rules at the same target)."""

    def __init__(self, target: float | None, delta: float = TRL_ENTROPY_COEF_DELTA,
                 init_coef: float = TRL_ENTROPY_COEF, min_coef: float = TRL_ENTROPY_COEF_MIN,
                 max_coef: float = TRL_ENTROPY_COEF_MAX, auto_scale: float = 1.0, auto_steps: int = 1) -> None:
        super().__init__(target, delta, init_coef, max_coef, auto_scale, auto_steps)
        self.min_coef = min_coef
        self.last_entropy = math.inf

    def update(self, entropy: float) -> float:
        alpha = super().update(entropy)
        self.last_entropy = float(entropy)
        return alpha

    def _step(self, entropy: float, target: float) -> float:
        return self.alpha + self.lr if entropy <= target else max(self.alpha - self.lr, self.min_coef)

    @property
    def coefficient(self) -> float:
        """coef while the last measured entropy is at or below the target, else 0 (TRL's `apply_coef`)."""
        return self.alpha if self.target is not None and self.last_entropy <= self.target else 0.0
