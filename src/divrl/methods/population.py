"""Population-GRPO (the execution-rewards paper, Sec. 4.3): K LoRA members on one base model, periodically scored,
souped and restarted from the soup plus noise. It acts around the steps, not in one: the controller is
`divrl.trainers.population.Population` (the algorithm: `divrl.core.population`); this file declares its
fields, card and preset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from divrl.methods import papers
from divrl.methods._fields import Unset, _help
from divrl.methods.base import Card, Method, Stage, register


@dataclass
class PopulationConfig:
    """The Population-GRPO fields of `DivRLConfig` (the execution-rewards paper, Sec. 4.3), each with its default and
    source."""

    population: bool = field(default=Unset(False), metadata=_help(
        "Population-GRPO (the execution-rewards paper, Sec. 4.3): K LoRA adapters on one base model, periodically "
        "scored, souped "
        "and restarted from the soup plus noise. Needs peft_config=LoraConfig(...). Default False."))
    population_size: int = field(default=5, metadata=_help(
        "Number of members K (the execution-rewards paper: K = 5; its ablation finds K = 5 best). Default 5."))
    population_top_m: int = field(default=3, metadata=_help(
        "Members M whose adapters are souped at each selection (the execution-rewards paper: M = 3). Default 3."))
    population_interval: int = field(default=10, metadata=_help(
        "T: optimizer steps EACH member trains between two selections (the execution-rewards paper: T = 10 epochs of "
        "its "
        "parallel policies), so a selection happens every K * T trainer steps. Default 10."))
    population_sigma: float = field(default=0.2, metadata=_help(
        "Restart noise relative to the soup: after a soup (and at the start) each member's LoRA factors get "
        "Gaussian noise scaled so that every layer's dW moves by exactly this fraction of the soup's ||dW||_F "
        "(a fresh adapter, dW = 0, is left as it is). The execution-rewards paper adds an absolute sigma_p = 0.01 to a "
        "small MLP's "
        "weights, 0.2-0.34 of its hidden layers' RMS weight; an absolute 0.01 on LoRA factors (entries ~1e-3) "
        "would swamp the soup. divrl's choice, the low end of that range. Default 0.2."))
    population_soup_rank: int | None = field(default=None, metadata=_help(
        "Rank r of the souped adapter (the exact soup has rank up to M x LoRA rank; the execution-rewards paper "
        "averages full "
        "weights and has no r). At most the LoRA rank; unused rank slots restart at zero (plus noise). "
        "Default None = the LoRA rank."))
    population_held_prompts: int = field(default=8, metadata=_help(
        "Prompts each member is scored on at a selection (the execution-rewards paper scores on its 8 prompts). Taken "
        "from "
        "eval_dataset when given, else held out from the end of train_dataset. Default 8."))

    def validate_population(self) -> None:
        """Raise a ValueError naming the field when a population field is out of range."""
        checks = (
            (self.population_size >= 1, "population_size", f"must be >= 1, got {self.population_size}"),
            (1 <= self.population_top_m <= self.population_size, "population_top_m",
             f"must satisfy 1 <= M <= population_size ({self.population_size}), got {self.population_top_m}"),
            (self.population_interval >= 1, "population_interval", f"must be >= 1, got {self.population_interval}"),
            (self.population_sigma >= 0, "population_sigma", f"must be >= 0, got {self.population_sigma}"),
            (self.population_soup_rank is None or self.population_soup_rank >= 1, "population_soup_rank",
             f"must be None or >= 1, got {self.population_soup_rank}"),
            (self.population_held_prompts >= 1, "population_held_prompts",
             f"must be >= 1, got {self.population_held_prompts}"),
        )
        for ok, name, problem in checks:
            if not ok:
                raise ValueError(f"DivRLConfig.{name} {problem}")


@register
class Population(Method):
    """OUTER: members, selection, soup and restart (`divrl.trainers.population.Population`)."""

    name = "population"
    switch = "population"
    stage = Stage.OUTER
    Config = PopulationConfig
    card = Card("Population-GRPO", "population-grpo", papers.EXECUTION_REWARDS)
    preset = {"population": True}

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.population)

    @classmethod
    def validate(cls, args: Any) -> None:
        args.validate_population()
