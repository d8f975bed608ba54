"""The part of TRL's own adaptive entropy controller (`use_adaptive_entropy`, Skywork-OR1) that TRL's
`GRPOTrainer._compute_loss` runs, for the toy policies: the coefficient its loss applies and its step at each
optimizer step, on the `EntropyBonus` that MaxEnt's method object drives (in the LLM trainer TRL's loss does both).
The rule is TRL 1.16's; the defaults are `GRPOConfig`'s (tests/toy/test_toy_runner.py checks them against the installed
TRL)."""

from __future__ import annotations

from divrl.methods import EntropyBonus

# GRPOConfig defaults of TRL 1.16: entropy_coef_delta / _min / _max.
TRL_ENTROPY_COEF_DELTA = 0.005
TRL_ENTROPY_COEF_MIN = 0.0
TRL_ENTROPY_COEF_MAX = 1.0


def applied_coefficient(bonus: EntropyBonus) -> float:
    """The coefficient TRL's loss applies: with its adaptive rule, only while the last step's entropy was at or below
    the target (TRL's `apply_coef`); otherwise the coefficient as set."""
    if bonus.adaptive:
        assert bonus.target is not None
        return bonus.coef if bonus.last_world_entropy <= bonus.target else 0.0
    return bonus.coef


def adaptive_step(bonus: EntropyBonus, entropy: float, delta: float = TRL_ENTROPY_COEF_DELTA,
                  min_coef: float = TRL_ENTROPY_COEF_MIN, max_coef: float = TRL_ENTROPY_COEF_MAX) -> None:
    """TRL's step at an optimizer step (adaptive rule only): coef + delta (at most max) when the step's entropy is at
    or below the target, else coef - delta (at least min); the step's entropy is recorded."""
    if not bonus.adaptive:
        return
    assert bonus.target is not None
    bonus.coef = min(bonus.coef + delta, max_coef) if entropy <= bonus.target else max(bonus.coef - delta, min_coef)
    bonus.last_world_entropy = float(entropy)
