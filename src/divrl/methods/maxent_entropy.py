"""The adaptive entropy bonus of MaxEnt-GRPO (the execution-rewards paper, Sec. 4.2, Eq. 4), driving TRL's own
entropy bonus `entropy_coef`. Two controllers, by `maxent_entropy_target`:

- 'auto' (the preset's): TRL's `use_adaptive_entropy` controller (Skywork-OR1). divrl measures the target H* on the
  policy's first optimizer steps (no bonus meanwhile), then sets TRL's `args.entropy_target` and
  `use_adaptive_entropy` and TRL's `_compute_loss` steps `entropy_coef` by +- `entropy_coef_delta` at each
  optimizer step. Each policy (each population member) keeps its own copy of TRL's controller state
  (`entropy_coef`, `_last_world_entropy`), swapped into the trainer before each loss and read back after it.
- a number: the paper's dual descent alpha <- max(0, alpha - lr (H - H*)) per optimizer step
  (`divrl.core.AdaptiveEntropyCoefficient`), written to `entropy_coef` before each loss.

Why: at the 'auto' target TRL's rule held the target at least as well as dual descent on the toy warm starts
(benchmarks/results/toy_entropy_control.md: bandit 7 of 10 seeds vs 0 of 10, hyper-grid and multiplicity 10 of 10
both), so the ecosystem's controller wins; an explicit target keeps the paper's rule, which the toy reproduction
at H* = 1.0 pins."""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core._groups import check_state_keys
from divrl.core.entropy import AdaptiveEntropyCoefficient, EntropyTargetMeasurement, far_below
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import EntropyBonus, LossContext, LossStep, Method, Stage, register
from divrl.methods.novelty import MAXENT_CARD

logger = logging.getLogger(__name__)


AUTO = "auto"


def parse_entropy_target(value: float | str) -> float | None:
    """`maxent_entropy_target` as the controller takes it: a finite number (a string from the command line too), or
    None for 'auto' (measured on the policy). ValueError otherwise."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return None
    try:
        target = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be 'auto' or a number, got {value!r}") from None
    if not math.isfinite(target):
        raise ValueError(f"must be 'auto' or a finite number, got {value!r}")
    return target


@dataclass
class MaxEntEntropyConfig:
    """The entropy-controller fields of `DivRLConfig`."""

    maxent_entropy_target: float | str | None = field(default=Unset(None), metadata=_help(
        "Target per-token entropy H* of MaxEnt's entropy bonus (the execution-rewards paper, Eq. 4), which drives "
        "TRL's entropy bonus coefficient `entropy_coef`. 'auto' (the MaxEnt preset's and recipes' value, divrl "
        "choice) measures the policy's own entropy over its first `maxent_entropy_auto_steps` optimizer steps (no "
        "bonus meanwhile), then hands `maxent_entropy_auto_scale` x it to TRL's own adaptive controller "
        "(`use_adaptive_entropy` with `entropy_target` = H*; tuned by TRL's `entropy_coef_delta` / `_min` / "
        "`_max`): the bonus acts only when entropy falls below where training started, so a warm-started (SFT / "
        "instruct) policy is kept from collapsing but never pushed to an entropy it did not have. TRL's rule "
        "because at this target it held the entropy at least as well as dual descent on the toy warm starts "
        "(benchmarks/results/toy_entropy_control.md: bandit 7 of 10 seeds vs 0 of 10, elsewhere tied). A number is "
        "an absolute target in nats, held by the paper's dual descent (`maxent_alpha_*`; the paper's H* = 1.0): "
        "after SFT a policy's entropy can sit far below it (0.06-0.09 in evidence v3's voxel warm starts), and the "
        "coefficient then rises every step until the bonus outweighs the reward and wrecks the policy (see "
        "`maxent_warn_steps`). Default None (off)."))
    maxent_entropy_auto_scale: float = field(default=1.0, metadata=_help(
        "With maxent_entropy_target='auto': H* = this x the measured starting entropy (1.0 holds the start's "
        "entropy; above 1 asks for more exploration than the start had). divrl choice. Default 1.0."))
    maxent_entropy_auto_steps: int = field(default=1, metadata=_help(
        "With maxent_entropy_target='auto': optimizer steps whose mean entropy (of the tokens the bonus acts on) "
        "sets the target; the first step alone measures the starting policy exactly. divrl choice. Default 1."))
    maxent_alpha_lr: float = field(default=0.01, metadata=_help(
        "Dual-descent step size (numeric maxent_entropy_target only): alpha <- max(0, alpha - lr (H - H*)) per "
        "optimizer step (the execution-rewards paper gives no value). Default 0.01."))
    maxent_alpha_init: float = field(default=0.0, metadata=_help(
        "Initial dual-descent coefficient alpha (numeric maxent_entropy_target only; the execution-rewards paper "
        "gives none; 0 lets dual descent raise it only when entropy falls below the target: divrl choice). "
        "Default 0.0."))
    maxent_alpha_max: float | None = field(default=None, metadata=_help(
        "Upper bound on the dual-descent alpha (numeric maxent_entropy_target only; 'auto' is bounded by TRL's "
        "entropy_coef_max). None = unbounded, as in the execution-rewards paper. Default None."))
    maxent_warn_steps: int = field(default=20, metadata=_help(
        "Log a one-line warning when the entropy has been far below the target (at most half of it) for this many "
        "optimizer steps in a row, each raising the coefficient (or leaving it at its cap: `maxent_alpha_max`, or "
        "TRL's `entropy_coef_max` with 'auto'): the target is out of the policy's reach and the bonus keeps "
        "growing. 0 = never. divrl choice. Default 20."))

    @property
    def maxent_entropy_enabled(self) -> bool:
        """Whether MaxEnt's entropy controller (TRL's for 'auto', dual descent for a number) drives TRL's bonus."""
        return self.maxent_entropy_target is not None


def _default(config: type | Any, name: str) -> Any:
    """The dataclass default of field `name` of `config` (a class or an instance)."""
    return next(spec.default for spec in dataclasses.fields(config) if spec.name == name)


DUAL_DESCENT_FIELDS = ("maxent_alpha_lr", "maxent_alpha_init", "maxent_alpha_max")


class TRLEntropyControl:
    """'auto' on TRL's adaptive entropy controller, for one policy: divrl measures H*, TRL steps the coefficient.

    While measuring, TRL's controller is off and `entropy_coef` is 0 (no bonus). Then the trainer runs TRL's
    controller toward H*: `push` writes this policy's TRL state into the trainer before each loss (TRL reads
    `use_adaptive_entropy`, `args.entropy_target`, `entropy_coef` and `_last_world_entropy` in `_compute_loss` and
    updates the last two at each optimizer step), through the loss context's `EntropyBonus`, which the trainer
    hands to TRL's loss and reads back; `pull` reads it back into this policy's state. TRL's state starts as TRL's
    own does: coefficient `entropy_coef` (0; the initial coefficient), last entropy +inf (no bonus before its
    first update). `far_below_steps` counts optimizer steps in a row whose entropy was far below H* (TRL raises the
    coefficient, or holds it at `entropy_coef_max`, at each); it is not checkpointed.
    """

    def __init__(self, scale: float, steps: int) -> None:
        self.measurement = EntropyTargetMeasurement(scale, steps)
        self.target: float | None = None
        self.entropy_coef = 0.0
        self.last_world_entropy = math.inf
        self.far_below_steps = 0

    @property
    def alpha(self) -> float:
        """The coefficient TRL's next loss applies when entropy is at or below the target."""
        return self.entropy_coef

    def measure(self, entropy: float) -> None:
        """One optimizer step's entropy while the target is measured."""
        if not math.isfinite(entropy):
            raise ValueError(f"measured entropy must be finite, got {entropy}")
        self.target = self.measurement.add(entropy)

    def push(self, bonus: EntropyBonus) -> None:
        """Make the entropy bonus TRL's next loss applies this policy's controller (off while the target is
        measured)."""
        bonus.adaptive = self.target is not None
        bonus.coef = self.entropy_coef if bonus.adaptive else 0.0
        bonus.target, bonus.last_world_entropy = self.target, self.last_world_entropy

    def pull(self, bonus: EntropyBonus, optimizer_step: bool) -> None:
        """After a loss on TRL's controller (training or evaluation): read back what TRL updated; at an optimizer
        step, count it toward the warning."""
        self.entropy_coef, self.last_world_entropy = bonus.coef, bonus.last_world_entropy
        if optimizer_step:
            assert self.target is not None
            far = far_below(self.last_world_entropy, self.target)
            self.far_below_steps = self.far_below_steps + 1 if far else 0

    def state_dict(self) -> dict[str, Any]:
        """The measured target (or the measurement so far) and TRL's controller state."""
        return {"controller": "trl", "target": self.target, "auto": self.measurement.state_dict(),
                "entropy_coef": self.entropy_coef, "last_world_entropy": self.last_world_entropy}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state saved by `state_dict`; a dual-descent state (an 'auto' run before divrl used TRL's
        controller for it) is refused with the setting that continues it."""
        if isinstance(state, dict) and "controller" not in state and "alpha" in state:
            target = state.get("target")
            fix = (f"resume with maxent_entropy_target={target!r} to continue it with dual descent" if target is
                   not None else "its target was not measured yet: start the run again")
            raise ValueError(f"MaxEnt's entropy state in this checkpoint is dual descent's ('auto' used it before "
                             f"divrl switched 'auto' to TRL's controller); {fix}")
        check_state_keys(state, ("target", "auto", "entropy_coef", "last_world_entropy"), "TRLEntropyControl")
        self.measurement = EntropyTargetMeasurement.from_state(state["auto"])
        self.target = None if state["target"] is None else float(state["target"])
        self.entropy_coef, self.last_world_entropy = float(state["entropy_coef"]), float(state["last_world_entropy"])


@register
class MaxEntEntropy(Method):
    """LOSS (training batches): before each loss, give TRL's entropy bonus this policy's coefficient; after it,
    measure the entropy of the tokens the bonus acts on (while measuring 'auto', or for dual descent) and act at
    each optimizer step: TRL's controller ('auto') or one dual-descent step (a number)."""

    name = "maxent_entropy"
    switch = "maxent_entropy_target"
    stage = Stage.LOSS
    order = 30
    Config = MaxEntEntropyConfig
    card = MAXENT_CARD
    preset = {"maxent_entropy_target": AUTO}  # divrl choice; the execution-rewards paper's H* = 1.0 is explicit
    state_key = "entropy"

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        target = parse_entropy_target(args.maxent_entropy_target)
        self.controller: AdaptiveEntropyCoefficient | TRLEntropyControl = (
            TRLEntropyControl(args.maxent_entropy_auto_scale, args.maxent_entropy_auto_steps) if target is None
            else AdaptiveEntropyCoefficient(target, args.maxent_alpha_lr, args.maxent_alpha_init,
                                            args.maxent_alpha_max))
        self.window: torch.Tensor | None = None  # (entropy sum, token count) since the last optimizer step

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.maxent_entropy_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        if args.maxent_entropy_target is not None:
            try:
                target = parse_entropy_target(args.maxent_entropy_target)
            except ValueError as error:
                check(False, "maxent_entropy_target", str(error))
            # one canonical value whatever the source (the command line gives strings): 'auto' or a float
            args.maxent_entropy_target = AUTO if target is None else target
        check(math.isfinite(args.maxent_entropy_auto_scale) and args.maxent_entropy_auto_scale > 0,
              "maxent_entropy_auto_scale", f"must be finite and > 0, got {args.maxent_entropy_auto_scale}")
        check(args.maxent_entropy_auto_steps >= 1, "maxent_entropy_auto_steps",
              f"must be >= 1, got {args.maxent_entropy_auto_steps}")
        check(args.maxent_warn_steps >= 0, "maxent_warn_steps", f"must be >= 0, got {args.maxent_warn_steps}")
        check(args.maxent_alpha_lr > 0, "maxent_alpha_lr", f"must be > 0, got {args.maxent_alpha_lr}")
        check(args.maxent_alpha_init >= 0, "maxent_alpha_init", f"must be >= 0, got {args.maxent_alpha_init}")
        check(args.maxent_alpha_max is None or args.maxent_alpha_max >= args.maxent_alpha_init,
              "maxent_alpha_max", f"must be >= maxent_alpha_init, got {args.maxent_alpha_max}")
        if args.maxent_entropy_target is None:
            return
        auto = args.maxent_entropy_target == AUTO
        check(not args.use_adaptive_entropy, "maxent_entropy_target",
              "'auto' switches TRL's use_adaptive_entropy on itself once the target is measured; leave "
              "use_adaptive_entropy False" if auto else
              "and use_adaptive_entropy=True are two entropy controllers; choose one")
        check(args.entropy_coef == 0.0, "maxent_entropy_target",
              f"drives entropy_coef itself; leave entropy_coef at 0 (got {args.entropy_coef})"
              + ("" if auto else " and set maxent_alpha_init for the starting value"))
        if auto:
            changed = [name for name in DUAL_DESCENT_FIELDS if getattr(args, name) != _default(MaxEntEntropyConfig,
                                                                                               name)]
            check(not changed, "maxent_entropy_target",
                  f"'auto' runs TRL's adaptive controller, which {', '.join(changed)} (dual descent, for a numeric "
                  "target) do not tune: set entropy_coef_delta / entropy_coef_min / entropy_coef_max instead")
            check(args.entropy_target == _default(args, "entropy_target"), "maxent_entropy_target",
                  f"'auto' gives TRL's controller the measured entropy as its target; leave entropy_target at its "
                  f"default (got {args.entropy_target}), or for a fixed target on TRL's controller set "
                  "use_adaptive_entropy and entropy_target without maxent_entropy_target")

    @classmethod
    def drives_entropy_bonus(cls, args: Any) -> bool:
        return True  # TRL applies `entropy_coef`, which this controller drives

    def state_dict(self) -> Any:
        return self.controller.state_dict()

    def load_state_dict(self, state: Any) -> None:
        if isinstance(self.controller, AdaptiveEntropyCoefficient) and isinstance(state, dict) \
                and state.get("controller") == "trl":
            raise ValueError("MaxEnt's entropy state in this checkpoint is TRL's controller's (target 'auto'); "
                             "resume with maxent_entropy_target: auto")
        self.controller.load_state_dict(state)

    def before_loss(self, context: LossContext) -> None:
        if isinstance(self.controller, TRLEntropyControl):
            self.controller.push(context.entropy_bonus)
        else:
            context.entropy_bonus.coef, context.entropy_bonus.adaptive = self.controller.alpha, False

    def loss_term(self, step: LossStep) -> None:
        context, controller = step.context, self.controller
        training = step.mode == "train"
        optimizer_step = training and bool(context.accelerator.sync_gradients)
        measuring = controller.target is None
        if isinstance(controller, TRLEntropyControl) and not measuring:
            # TRL's loss measured the entropy and stepped the coefficient
            controller.pull(context.entropy_bonus, optimizer_step)
        elif training:
            # Measure the entropy the bonus drives: TRL's bonus acts on the top-entropy tokens when
            # top_entropy_quantile < 1, so the controller measures those same tokens.
            mask = step.mask if step.entropy_mask is None else step.mask * step.entropy_mask
            stats = torch.stack([(step.entropies * mask).sum(), mask.sum().to(step.entropies.dtype)]).detach()
            self.window = stats if self.window is None else self.window + stats
            if optimizer_step:
                totals = context.accelerator.reduce(self.window, reduction="sum")
                entropy = (totals[0] / totals[1].clamp(min=1.0)).item()
                if isinstance(controller, TRLEntropyControl):
                    controller.measure(entropy)
                else:
                    controller.update(entropy)  # the next loss's coefficient (`before_loss` hands it to TRL)
                self.window = None
        if optimizer_step:
            context.metrics["train"]["maxent/alpha"].append(controller.alpha)
            self._report(measuring)
        return None

    def _report(self, measuring: bool) -> None:
        """Log the measured target once, and warn once per run of `maxent_warn_steps` steps far below target."""
        controller, warn_after = self.controller, self.args.maxent_warn_steps
        if measuring and controller.target is not None:
            logger.info("MaxEnt: entropy target 'auto' measured: H* = %.4f nats per token; TRL's adaptive entropy "
                        "controller holds it from the next step", controller.target)
        if warn_after and controller.far_below_steps == warn_after:
            trl = isinstance(controller, TRLEntropyControl)
            logger.warning(
                "MaxEnt: entropy has stayed far below its target H* = %.3f for %d steps while the coefficient "
                "rose to %.3g: the bonus may outgrow the reward; %s", controller.target, warn_after, controller.alpha,
                "lower maxent_entropy_auto_scale or bound entropy_coef_max" if trl else
                "lower maxent_entropy_target ('auto' holds the starting entropy) or bound maxent_alpha_max")
