"""Length-conditional advantages (the execution-rewards paper, Sec. 4.2, Eq. 6; part of MaxEnt-GRPO): rewards are
centred (and scaled) within completion-length percentile bins of each group, so that length alone earns no advantage
(`divrl.core.length_conditional_advantages`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import length_conditional_advantages
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import AdvantageStep, Method, Stage, register
from divrl.methods.novelty import MAXENT_CARD


@dataclass
class LengthBinsConfig:
    """The length-bins field of `DivRLConfig`."""

    length_bins: int = field(default=Unset(0), metadata=_help(
        "Number L of completion-length percentile bins inside each group for length-conditional advantage "
        "normalisation (the execution-rewards paper, Eq. 6: L = 3; centred within each bin, then scaled as "
        "`scale_rewards` says: by the bin's std for 'group'). 0 = off (TRL's normalisation). Default 0."))

    @property
    def length_bins_enabled(self) -> bool:
        """Whether advantages are normalised within length bins (L >= 2; one bin is TRL's normalisation)."""
        return self.length_bins >= 2


@register
class LengthBins(Method):
    """ADVANTAGE (training and evaluation batches): replaces TRL's group normalisation."""

    name = "length_bins"
    switch = "length_bins"
    stage = Stage.ADVANTAGE
    order = 10
    Config = LengthBinsConfig
    card = MAXENT_CARD
    preset = {"length_bins": 3}  # the execution-rewards paper
    train_only = False
    needs_lengths = True
    replaces_advantages = True

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.length_bins_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        check(args.length_bins >= 0, "length_bins", f"must be >= 0 (0 = off), got {args.length_bins}")
        check(args.length_bins <= args.num_generations, "length_bins",
              f"({args.length_bins}) cannot exceed num_generations ({args.num_generations})")

    def advantages(self, step: AdvantageStep) -> torch.Tensor:
        return length_conditional_advantages(step.filled.cpu(), step.lengths.cpu().float(), step.group,
                                             self.args.length_bins, scale=step.scale_rewards)
