"""Outcome keys: what IPS and the count bonus count. Each completion's key comes from the task's `outcome_key`
hook, the normalised completion text, or (`ips_outcome_key='semantic'`) a class of similar completions found by
leader clustering of their embeddings (`divrl.core.LeaderClusters`; the classes are learned state)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from divrl.core import LeaderClusters
from divrl.methods._fields import _help, check, check_choice
from divrl.methods.base import Method, RewardStep, Stage, counts_outcomes, register
from divrl.methods.hooks import checked_embed, checked_outcome_key, normalized_text_key, refuse
from divrl.task import has_hook

logger = logging.getLogger(__name__)

OUTCOME_KEY_SOURCES = ("auto", "task", "text", "semantic")
SEMANTIC_EMBEDDINGS = ("ngram", "task")


@dataclass
class OutcomeKeyConfig:
    """Where outcome keys come from (`DivRLConfig` fields)."""

    ips_outcome_key: str = field(default="auto", metadata=_help(
        "Where outcome keys come from: 'task' (task.outcome_key), 'text' (normalised completion text) or "
        "'auto' (the task hook when present, else text, with a warning) or 'semantic' (classes of similar "
        "completions by leader clustering of embeddings, for free text: see semantic_*). The IPS paper keys "
        "outcomes by equivalence class (canonical hypothesis, scaffold); the text and semantic keys are divrl's. The "
        "count bonus uses the same keys. Default 'auto'."))
    semantic_threshold: float = field(default=0.6, metadata=_help(
        "ips_outcome_key='semantic': cosine similarity at which a completion joins an existing class (leader "
        "clustering; classes persist across steps and checkpoints). DARLING (Li et al. 2025) partitions answers with "
        "a learned classifier; this offline stand-in is a divrl choice: on hashed 3-grams, paraphrases sharing words "
        "score 0.5-0.8 and unrelated sentences about 0.1. Default 0.6."))
    semantic_embedding: str = field(default="ngram", metadata=_help(
        "ips_outcome_key='semantic': what is clustered: 'ngram' (hashed character 3-grams, offline, deterministic) "
        "or 'task' (task.embed, e.g. a sentence encoder). Default 'ngram'."))
    semantic_max_classes: int = field(default=4096, metadata=_help(
        "ips_outcome_key='semantic': most classes kept; beyond it a completion joins its most similar class "
        "(bounds memory and time). Default 4096."))

    @property
    def semantic_keys_enabled(self) -> bool:
        """Whether outcome keys are semantic classes (leader clustering), for a method that counts outcomes."""
        return self.ips_outcome_key == "semantic" and counts_outcomes(self)


@register
class OutcomeKeys(Method):
    """Sets `step.keys` for the methods that count outcomes; on whenever one of them is."""

    name = "outcome_keys"
    switch = "ips_outcome_key"
    stage = Stage.REWARD
    order = 0
    Config = OutcomeKeyConfig
    state_key = "clusters"

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.clusters = (LeaderClusters(args.semantic_threshold, args.semantic_max_classes)
                         if args.semantic_keys_enabled else None)

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return counts_outcomes(args)

    @classmethod
    def validate(cls, args: Any) -> None:
        check_choice("ips_outcome_key", args.ips_outcome_key, OUTCOME_KEY_SOURCES)
        check_choice("semantic_embedding", args.semantic_embedding, SEMANTIC_EMBEDDINGS)
        check(math.isfinite(args.semantic_threshold) and -1 <= args.semantic_threshold <= 1, "semantic_threshold",
              f"must be a cosine similarity in [-1, 1], got {args.semantic_threshold}")
        check(args.semantic_max_classes >= 1, "semantic_max_classes", f"must be >= 1, got {args.semantic_max_classes}")

    @classmethod
    def resolve_hooks(cls, args: Any, task: Any) -> dict[str, Any]:
        if args.semantic_keys_enabled:  # keys are classes of the batch's embeddings, not a per-completion hook
            if args.semantic_embedding != "task":
                return {}
            if not has_hook(task, "embed"):
                refuse("semantic_embedding", "'task' needs a task with an `embed(completion, **row)` hook")
            return {"embed": checked_embed(task.embed)}
        source = args.ips_outcome_key
        if source == "task" and not has_hook(task, "outcome_key"):
            refuse("ips_outcome_key", "'task' needs a task object with an `outcome_key(completion, **row)` hook")
        if source == "text" or (source == "auto" and not has_hook(task, "outcome_key")):
            if source == "auto":
                logger.warning(
                    "IPS / count bonus: the task has no `outcome_key` hook; using the normalised completion text as "
                    "the outcome (distinct texts count as distinct outcomes). Set ips_outcome_key='text' to silence "
                    "this."
                )
            return {"outcome_key": normalized_text_key}
        return {"outcome_key": checked_outcome_key(task.outcome_key)}

    def has_state(self) -> bool:
        return self.clusters is not None

    def state_dict(self) -> Any:
        return None if self.clusters is None else self.clusters.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.clusters.load_state_dict(state)

    def shape_rewards(self, step: RewardStep) -> None:
        if self.clusters is not None:
            step.keys = self.clusters.assign(step.embeddings(self.args.semantic_embedding))
            step.metrics["semantic/classes"].append(float(len(self.clusters)))
        else:
            step.keys = step.outcome_keys()
