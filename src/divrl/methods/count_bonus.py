"""Outcome-count bonus (historical UCB exploration, Song, Kempe & Munos 2025): c / sqrt(1 + n(x, o)) for a valid
completion whose outcome o was sampled n times for prompt x so far, this step included
(`divrl.core.OutcomeCounts`; the counts are learned state)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from divrl.core import OutcomeCounts
from divrl.core.counts import COUNT_SCOPES
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check, check_choice
from divrl.methods.base import Card, Method, RewardStep, Stage, register


@dataclass
class CountBonusConfig:
    """The count-bonus fields of `DivRLConfig`."""

    count_bonus_coef: float = field(default=Unset(0.0), metadata=_help(
        "Coefficient c of the bonus c / sqrt(1 + n(x, o)) added to a valid completion (the task's first reward "
        "function scores it above 0), n(x, o) = how often outcome o was sampled for prompt x so far in training, "
        "this step included (the paper's historical exploration; counting this step too makes repeats inside "
        "the group earn less, order-free: divrl choice). Counts are checkpointed. Default 0.0 (off)."))
    count_bonus_scope: str = field(default="prompt", metadata=_help(
        "'prompt': count each (prompt, outcome) (the paper's n(x, a)); 'global': count outcomes over all prompts, "
        "so one answer written for every observation is penalised (divrl option). Default 'prompt'."))

    @property
    def count_bonus_enabled(self) -> bool:
        """Whether the cross-step outcome-count bonus is added to rewards."""
        return self.count_bonus_coef > 0


@register
class CountBonus(Method):
    """REWARD: the bonus column gains c / sqrt(1 + n(x, o)) for completions the first reward function scores
    above 0, counting them first."""

    name = "count_bonus"
    switch = "count_bonus_coef"
    stage = Stage.REWARD
    order = 50
    Config = CountBonusConfig
    card = Card("Count-bonus GRPO", "count-bonus-grpo", papers.OUTCOME_EXPLORATION)
    preset = {"count_bonus_coef": 0.5}  # divrl choice: half the validity reward of HypoSpace
    state_key = "counts"
    counts_outcomes = True
    bonus = True

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.counts = OutcomeCounts(args.count_bonus_coef, args.count_bonus_scope)

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.count_bonus_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        check_choice("count_bonus_scope", args.count_bonus_scope, COUNT_SCOPES)
        check(math.isfinite(args.count_bonus_coef) and args.count_bonus_coef >= 0, "count_bonus_coef",
              f"must be a finite number >= 0 (0 = off), got {args.count_bonus_coef}")

    def state_dict(self) -> Any:
        return self.counts.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.counts.load_state_dict(state)

    def shape_rewards(self, step: RewardStep) -> None:
        contexts = step.prompt_keys()
        valid_keys = [key if reward > 0 else None for key, reward in zip(step.keys, step.primary.tolist(), strict=True)]
        bonus = self.counts.bonus(contexts, valid_keys)
        step.metrics["count/bonus"].append(bonus.mean().item())
        step.metrics["count/distinct_outcomes"].append(float(self.counts.distinct()))
        step.bonus += bonus
