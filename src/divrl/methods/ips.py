"""IPS-GRPO (the IPS paper, Eq. 9): each completion's task rewards divided by the in-group frequency of its outcome,
max(p_hat, epsilon), so that the policy's outcome probabilities converge proportional to reward
(`divrl.core.ips_scale`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import ips_scale
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import Card, Method, RewardStep, Stage, register


@dataclass
class IPSConfig:
    """The IPS fields of `DivRLConfig`."""

    ips: bool = field(default=Unset(False), metadata=_help(
        "Inverse probability scaling of rewards (the IPS paper, Eq. 9). Default False."))
    ips_epsilon: float = field(default=1e-3, metadata=_help(
        "Probability floor epsilon in r / max(p_hat, epsilon) (the IPS paper, Eq. 9; the paper ablates it). "
        "Default 1e-3, inactive while 1/G > epsilon."))


@register
class IPS(Method):
    """REWARD: the task columns times 1 / max(p_hat, epsilon), p_hat = the outcome's share of its group."""

    name = "ips"
    switch = "ips"
    stage = Stage.REWARD
    order = 10
    Config = IPSConfig
    card = Card("IPS-GRPO", "ips-grpo", papers.IPS)
    preset = {"ips": True}
    counts_outcomes = True
    scales_by_group = True

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.ips)

    @classmethod
    def validate(cls, args: Any) -> None:
        check(args.ips_epsilon > 0, "ips_epsilon", f"must be > 0, got {args.ips_epsilon}")

    def shape_rewards(self, step: RewardStep) -> None:
        # The IPS factor 1 / max(p_hat, epsilon) per completion = ips_scale of unit rewards.
        scaled = ips_scale(torch.ones(len(step.keys)), step.keys, step.group, self.args.ips_epsilon)
        step.scale_task_rewards(scaled.rewards)
        step.metrics["ips/distinct_outcomes"].append(scaled.distinct_per_group.float().mean().item())
        step.metrics["ips/max_scale"].append(scaled.max_scale)
