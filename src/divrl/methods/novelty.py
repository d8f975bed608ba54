"""kNN novelty (the execution-rewards paper, Sec. 4.2, Eq. 5; part of MaxEnt-GRPO): gamma x the mean distance of a
completion's embedding to its k nearest neighbours in a rolling memory of past completions
(`divrl.core.NoveltyMemory`; the memory is learned state)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import NoveltyMemory
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check, check_choice
from divrl.methods.base import Card, Method, RewardStep, Stage, register
from divrl.methods.hooks import checked_embed, refuse
from divrl.task import has_hook

NOVELTY_EMBEDDINGS = ("ngram", "hidden", "task")
MAXENT_CARD = Card("MaxEnt-GRPO", "maxent-grpo", papers.EXECUTION_REWARDS)  # entropy, novelty, length bins


@dataclass
class NoveltyConfig:
    """The novelty fields of `DivRLConfig`."""

    novelty_coef: float = field(default=Unset(0.0), metadata=_help(
        "Novelty coefficient gamma of the kNN novelty bonus (the execution-rewards paper, Eq. 5: gamma = 0.3). Default "
        "0.0 (off)."))
    novelty_memory_size: int = field(default=512, metadata=_help(
        "Rolling memory size M of past completion embeddings (the execution-rewards paper: 512). Default 512."))
    novelty_k: int = field(default=5, metadata=_help(
        "Nearest neighbours k (the execution-rewards paper: 5). Default 5."))
    novelty_embedding: str = field(default="ngram", metadata=_help(
        "Completion embedding: 'ngram' (hashed character 3-grams, cheap, deterministic), 'hidden' (the policy's "
        "mean-pooled last hidden state over the completion: one extra no-grad forward) or 'task' (task.embed). "
        "The execution-rewards paper's simulated ideas are vectors already (kNN over them, k=5, memory 512); for text "
        "the cheap default is a divrl choice. Default 'ngram'."))

    @property
    def novelty_enabled(self) -> bool:
        """Whether the kNN novelty bonus is added to rewards."""
        return self.novelty_coef > 0


@register
class Novelty(Method):
    """REWARD: the bonus column gains each valid completion's novelty; valid completions are then remembered. An
    output the task scores 0 is neither paid nor remembered."""

    name = "novelty"
    switch = "novelty_coef"
    stage = Stage.REWARD
    order = 40
    Config = NoveltyConfig
    card = MAXENT_CARD
    preset = {"novelty_coef": 0.3}  # the execution-rewards paper
    state_key = "novelty"
    bonus = True

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.memory = NoveltyMemory(args.novelty_memory_size, args.novelty_k, args.novelty_coef)

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.novelty_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        check_choice("novelty_embedding", args.novelty_embedding, NOVELTY_EMBEDDINGS)
        check(args.novelty_coef >= 0, "novelty_coef", f"must be >= 0, got {args.novelty_coef}")
        check(args.novelty_memory_size >= 1, "novelty_memory_size", f"must be >= 1, got {args.novelty_memory_size}")
        check(args.novelty_k >= 1, "novelty_k", f"must be >= 1, got {args.novelty_k}")

    @classmethod
    def resolve_hooks(cls, args: Any, task: Any) -> dict[str, Any]:
        if args.novelty_embedding != "task":
            return {}
        if not has_hook(task, "embed"):
            refuse("novelty_embedding", "'task' needs a task with an `embed(completion, **row)` hook")
        return {"embed": checked_embed(task.embed)}

    def state_dict(self) -> Any:
        return self.memory.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.memory.load_state_dict(state)

    def shape_rewards(self, step: RewardStep) -> None:
        embeddings = step.embeddings(self.args.novelty_embedding)
        valid = ~torch.isnan(embeddings).any(dim=1) & (step.primary > 0)
        novelty = torch.zeros(len(embeddings))
        if valid.any():
            novelty[valid] = self.memory.score(embeddings[valid])
            self.memory.add(embeddings[valid])
        step.metrics["maxent/novelty"].append(novelty[valid].mean().item() if valid.any() else 0.0)
        step.bonus += novelty
