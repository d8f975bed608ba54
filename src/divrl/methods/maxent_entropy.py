"""The adaptive entropy bonus (the execution-rewards paper, Sec. 4.2, Eq. 4; part of MaxEnt-GRPO): a dual-descent
coefficient alpha <- max(0, alpha - lr (H - H*)) per optimizer step (`divrl.core.AdaptiveEntropyCoefficient`; the
coefficient is learned state) drives TRL's own entropy bonus `entropy_coef`."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import AdaptiveEntropyCoefficient
from divrl.methods.base import LossStep, Method, Stage, register
from divrl.methods.novelty import MAXENT_CARD
from divrl.trainers._fields import Unset, _help, check

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
        "Target per-token entropy H* of the dual-descent entropy coefficient (the execution-rewards paper, Eq. 4), "
        "which drives TRL's entropy bonus coefficient `entropy_coef`. 'auto' (the MaxEnt preset's and recipes' "
        "value, divrl choice) measures the policy's own entropy over its first `maxent_entropy_auto_steps` "
        "optimizer steps (no bonus meanwhile) and holds `maxent_entropy_auto_scale` x it: the bonus acts only when "
        "entropy falls below where training started, so a warm-started (SFT / instruct) policy is kept from "
        "collapsing but is never pushed to an entropy it did not have. A number is an absolute target in nats (the "
        "paper's H* = 1.0): after SFT a policy's entropy can sit far below it (0.06-0.09 in evidence v3's voxel "
        "warm starts), and the coefficient then rises every step until the bonus outweighs the reward and wrecks "
        "the policy (see `maxent_warn_steps`). Default None (off)."))
    maxent_entropy_auto_scale: float = field(default=1.0, metadata=_help(
        "With maxent_entropy_target='auto': H* = this x the measured starting entropy (1.0 holds the start's "
        "entropy; above 1 asks for more exploration than the start had). divrl choice. Default 1.0."))
    maxent_entropy_auto_steps: int = field(default=1, metadata=_help(
        "With maxent_entropy_target='auto': optimizer steps whose mean entropy (of the tokens the bonus acts on) "
        "sets the target; the first step alone measures the starting policy exactly. divrl choice. Default 1."))
    maxent_alpha_lr: float = field(default=0.01, metadata=_help(
        "Dual-descent step size: alpha <- max(0, alpha - lr (H - H*)) per optimizer step (the execution-rewards paper "
        "gives no value). Default 0.01."))
    maxent_alpha_init: float = field(default=0.0, metadata=_help(
        "Initial entropy coefficient alpha (the execution-rewards paper gives none; 0 lets dual descent raise it only "
        "when entropy falls below the target: divrl choice). Default 0.0."))
    maxent_alpha_max: float | None = field(default=None, metadata=_help(
        "Upper bound on alpha (None = unbounded, as in the execution-rewards paper). Default None."))
    maxent_warn_steps: int = field(default=20, metadata=_help(
        "Log a one-line warning when the entropy has been far below the target (at most half of it) for this many "
        "optimizer steps in a row, each raising alpha (or leaving it at `maxent_alpha_max`): the target is out of "
        "the policy's reach and the bonus keeps growing. 0 = never. divrl choice. Default 20."))

    @property
    def maxent_entropy_enabled(self) -> bool:
        """Whether the dual-descent entropy coefficient drives TRL's entropy bonus."""
        return self.maxent_entropy_target is not None


@register
class MaxEntEntropy(Method):
    """LOSS (training batches): set TRL's `entropy_coef` before each loss; after it, accumulate the entropy of the
    tokens TRL's bonus acts on and take one dual-descent step per optimizer step."""

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
        self.controller = AdaptiveEntropyCoefficient(
            parse_entropy_target(args.maxent_entropy_target), args.maxent_alpha_lr, args.maxent_alpha_init,
            args.maxent_alpha_max, args.maxent_entropy_auto_scale, args.maxent_entropy_auto_steps)
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
        if args.maxent_entropy_target is not None:
            check(not args.use_adaptive_entropy, "maxent_entropy_target",
                  "and use_adaptive_entropy=True are two entropy controllers; choose one")
            check(args.entropy_coef == 0.0, "maxent_entropy_target",
                  f"drives entropy_coef itself; leave entropy_coef at 0 (got {args.entropy_coef}) and set "
                  "maxent_alpha_init for the starting value")

    def configure_trainer(self, trainer: Any) -> None:
        trainer._entropy_bonus_enabled = True  # TRL applies `entropy_coef`, which this controller drives

    def state_dict(self) -> Any:
        return self.controller.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.controller.load_state_dict(state)

    def before_loss(self, trainer: Any) -> None:
        trainer.entropy_coef = self.controller.alpha

    def loss_term(self, step: LossStep) -> None:
        if step.mode != "train":
            return None
        # Measure the entropy the bonus drives: TRL's bonus acts on the top-entropy tokens when
        # top_entropy_quantile < 1, so the controller measures those same tokens.
        mask = step.mask if step.entropy_mask is None else step.mask * step.entropy_mask
        stats = torch.stack([(step.entropies * mask).sum(), mask.sum().to(step.entropies.dtype)]).detach()
        self.window = stats if self.window is None else self.window + stats
        trainer = step.trainer
        if trainer.accelerator.sync_gradients:
            totals = trainer.accelerator.reduce(self.window, reduction="sum")
            measuring = self.controller.target is None
            alpha = self.controller.update((totals[0] / totals[1].clamp(min=1.0)).item())
            trainer.entropy_coef = alpha
            self.window = None
            trainer._metrics["train"]["maxent/alpha"].append(alpha)
            self._report(measuring)
        return None

    def _report(self, measuring: bool) -> None:
        """Log the measured target once, and warn once per run of `maxent_warn_steps` steps far below target."""
        controller, warn_after = self.controller, self.args.maxent_warn_steps
        if measuring and controller.target is not None:
            logger.info("MaxEnt: entropy target 'auto' measured: H* = %.4f nats per token", controller.target)
        if warn_after and controller.far_below_steps == warn_after:
            logger.warning(
                "MaxEnt: entropy has stayed far below its target H* = %.3f for %d steps while the coefficient "
                "rose to %.3g: the bonus may outgrow the reward; lower maxent_entropy_target ('auto' holds the "
                "starting entropy) or bound maxent_alpha_max", controller.target, warn_after, controller.alpha)
