"""Unlikeliness reward ("Rewarding the Unlikely", He, Fried & Welleck 2025): a group's task rewards times
1 - beta * rank / G, rank = position by mean per-token log-prob under the sampling policy (0 = least likely), so a
likely correct sample earns less than an unlikely one (`divrl.core.unlikeliness_factors`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from divrl.core import unlikeliness_factors
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import Card, Method, RewardStep, Stage, register


@dataclass
class UnlikelinessConfig:
    """The unlikeliness field of `DivRLConfig`."""

    unlikeliness_beta: float = field(default=Unset(0.0), metadata=_help(
        "beta_rank of the unlikeliness reward: the task rewards of a group's samples are multiplied by "
        "1 - beta * rank / G, rank = position by mean per-token log-prob under the sampling policy (0 = least "
        "likely), so a likely correct sample earns less than an unlikely one. Log-probs come from the sampler "
        "(vLLM's, or divrl's CPU sampler: free) when present, else one no-grad forward over the completions. The "
        "paper's release uses 0.25. Default 0.0 (off)."))

    @property
    def unlikeliness_enabled(self) -> bool:
        """Whether rewards are scaled by the unlikeliness rank factor."""
        return self.unlikeliness_beta > 0


@register
class Unlikeliness(Method):
    """REWARD: the task columns times the group's unlikeliness rank factor."""

    name = "unlikeliness"
    switch = "unlikeliness_beta"
    stage = Stage.REWARD
    order = 20
    Config = UnlikelinessConfig
    card = Card("Unlikeliness GRPO", "unlikeliness-grpo", papers.UNLIKELY)
    preset = {"unlikeliness_beta": 0.25}  # the paper's release

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.unlikeliness_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        check(0 <= args.unlikeliness_beta <= 1, "unlikeliness_beta",
              f"must be in [0, 1] (0 = off; the factor 1 - beta * rank / G stays >= 0), got {args.unlikeliness_beta}")

    @classmethod
    def needs_sampled_logps(cls, args: Any) -> bool:
        return True

    def shape_rewards(self, step: RewardStep) -> None:
        step.scale_task_rewards(unlikeliness_factors(step.sequence_logps(), step.group, self.args.unlikeliness_beta))
