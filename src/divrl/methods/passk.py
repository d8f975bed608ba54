"""Pass@k Training (Chen et al. 2025): the advantages of the best-of-k objective in closed form, the mean advantage
of the k-subsets of the group holding each sample (`divrl.core.passk_advantages`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import passk_advantages
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import AdvantageStep, Card, Method, Stage, register


@dataclass
class PassAtKConfig:
    """The pass@k field of `DivRLConfig`."""

    passk: int = field(default=Unset(0), metadata=_help(
        "k of the pass@k (best-of-k) objective: advantages become the mean advantage of the k-subsets of the group "
        "holding each sample, a subset scored by its best reward and normalised over the subsets (Pass@k Training's "
        "analytical derivation, exact for any reward: `divrl.core.passk_advantages`). Replaces TRL's group "
        "normalisation; `scale_rewards='none'` only centres. 0 = off; 2 <= k < num_generations. Default 0."))

    @property
    def passk_enabled(self) -> bool:
        """Whether advantages are pass@k (best-of-k) advantages."""
        return self.passk >= 2


@register
class PassAtK(Method):
    """ADVANTAGE (training batches): replaces TRL's group normalisation."""

    name = "passk"
    switch = "passk"
    stage = Stage.ADVANTAGE
    order = 10
    Config = PassAtKConfig
    card = Card("Pass@k GRPO", "passk-grpo", papers.PASSK)
    preset = {"passk": 4}  # divrl choice: half of TRL's default group of 8
    replaces_advantages = True

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.passk_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        check(args.passk == 0 or 2 <= args.passk < args.num_generations, "passk",
              f"must be 0 (off) or >= 2 and below num_generations ({args.num_generations}; at k = G every sample is "
              f"in the one subset, so every advantage is 0), got {args.passk}")
        if args.passk_enabled:
            check(args.scale_rewards in ("group", "none"), "passk",
                  f"normalises by the std of each group's subset maxima: use scale_rewards 'group' or 'none', "
                  f"got {args.scale_rewards!r}")

    def advantages(self, step: AdvantageStep) -> torch.Tensor:
        return passk_advantages(step.filled.cpu(), step.group, self.args.passk, scale=step.scale_rewards != "none")
