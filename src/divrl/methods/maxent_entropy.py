"""The adaptive entropy bonus (the execution-rewards paper, Sec. 4.2, Eq. 4; part of MaxEnt-GRPO): a dual-descent
coefficient alpha <- max(0, alpha - lr (H - H*)) per optimizer step (`divrl.core.AdaptiveEntropyCoefficient`; the
coefficient is learned state) drives TRL's own entropy bonus `entropy_coef`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import AdaptiveEntropyCoefficient
from divrl.methods.base import LossStep, Method, Stage, register
from divrl.methods.novelty import MAXENT_CARD
from divrl.trainers._fields import Unset, _help, check


@dataclass
class MaxEntEntropyConfig:
    """The entropy-controller fields of `DivRLConfig`."""

    maxent_entropy_target: float | None = field(default=Unset(None), metadata=_help(
        "Target per-token entropy H* for the dual-descent entropy coefficient (the execution-rewards paper, Eq. 4; "
        "the paper's default H* = 1.0). It drives TRL's entropy bonus coefficient `entropy_coef`. After SFT a policy's "
        "entropy can sit far below 1.0 (0.06-0.09 nats in evidence v3's voxel warm starts), and then the coefficient "
        "rises every step until the bonus outweighs the reward: set the target near the measured `entropy`, or bound "
        "`maxent_alpha_max`. Default None (off)."))
    maxent_alpha_lr: float = field(default=0.01, metadata=_help(
        "Dual-descent step size: alpha <- max(0, alpha - lr (H - H*)) per optimizer step (the execution-rewards paper "
        "gives no value). Default 0.01."))
    maxent_alpha_init: float = field(default=0.0, metadata=_help(
        "Initial entropy coefficient alpha (the execution-rewards paper gives none; 0 lets dual descent raise it only "
        "when entropy falls below the target: divrl choice). Default 0.0."))
    maxent_alpha_max: float | None = field(default=None, metadata=_help(
        "Upper bound on alpha (None = unbounded, as in the execution-rewards paper). Default None."))

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
    preset = {"maxent_entropy_target": 1.0}  # the execution-rewards paper
    state_key = "entropy"

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.controller = AdaptiveEntropyCoefficient(args.maxent_entropy_target, args.maxent_alpha_lr,
                                                     args.maxent_alpha_init, args.maxent_alpha_max)
        self.window: torch.Tensor | None = None  # (entropy sum, token count) since the last optimizer step

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.maxent_entropy_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
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
            alpha = self.controller.update((totals[0] / totals[1].clamp(min=1.0)).item())
            trainer.entropy_coef = alpha
            self.window = None
            trainer._metrics["train"]["maxent/alpha"].append(alpha)
        return None
