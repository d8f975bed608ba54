"""Set-level leave-one-out diversity (SGRPO: Ye et al. 2026, arXiv 2605.08659): each valid completion is paid its
share of its group's set diversity, lambda x (D(G) - D(G without it)) (`divrl.core.leave_one_out_diversity`).

D is 1 - the mean pairwise similarity of the group's valid completions (SGRPO's released code, IDEA-XL/SGRPO
`src/genmol/diversity.py`: Morgan radius-2 2048-bit fingerprints with Tanimoto for molecules, which is what the
molecule task's `embed` returns; other tasks: the embeddings `set_diversity_embedding` names). Valid = the task gave
the completion an embedding and a score above 0 (as the novelty bonus reads it); an invalid completion gets 0.
lambda = 0.9 is the diversity weight of SGRPO's public small-molecule configs (`group_advantage_weight`) and of its
raw leave-one-out ablation. SGRPO's main method goes further: it samples a supergroup of sets per condition, gives
each set its diversity relative to the supergroup's other sets, and shares that set advantage among the set's
members by softmax weights of their leave-one-out credits; divrl pays the credit itself, the form the issue and
SGRPO's ablation use, so the bonus is a plain per-sample reward that composes with every GRPO-style method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core.set_diversity import SIMILARITIES, leave_one_out_diversity
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check, check_choice
from divrl.methods.base import Card, Method, RewardStep, Stage, register
from divrl.methods.hooks import checked_embed, refuse
from divrl.task import has_hook

SET_DIVERSITY_EMBEDDINGS = ("auto", "task", "ngram", "hidden")


@dataclass
class SetDiversityConfig:
    """The set-diversity fields of `DivRLConfig`."""

    set_diversity_coef: float = field(default=Unset(0.0), metadata=_help(
        "lambda of SGRPO's leave-one-out set diversity bonus lambda (D(G) - D(G without i)) (Ye et al. 2026; its "
        "small-molecule configs weight diversity 0.9). Default 0.0 (off)."))
    set_diversity_embedding: str = field(default="auto", metadata=_help(
        "What D compares: 'task' (task.embed: Morgan fingerprints for molecules), 'ngram' (hashed character "
        "3-gram counts), 'hidden' (the policy's pooled hidden states) or 'auto' ('task' when the task has an "
        "`embed` hook, else 'ngram'). Default 'auto'."))
    set_diversity_similarity: str = field(default="tanimoto", metadata=_help(
        "Pairwise similarity in D: 'tanimoto' (SGRPO's, on fingerprints; the continuous Tanimoto on other "
        "non-negative vectors) or 'cosine' (for embeddings with negative entries, such as 'hidden'). Default "
        "'tanimoto'."))


@register
class SetDiversity(Method):
    """REWARD: the bonus column gains lambda x each valid completion's leave-one-out share of its group's D."""

    name = "set_diversity"
    switch = "set_diversity_coef"
    stage = Stage.REWARD
    order = 45
    Config = SetDiversityConfig
    card = Card("SGRPO set diversity", "sgrpo", papers.SGRPO)
    preset = {"set_diversity_coef": 0.9}  # SGRPO's small-molecule diversity weight
    bonus = True

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.set_diversity_coef > 0

    @classmethod
    def validate(cls, args: Any) -> None:
        check(args.set_diversity_coef >= 0, "set_diversity_coef", f"must be >= 0, got {args.set_diversity_coef}")
        check_choice("set_diversity_embedding", args.set_diversity_embedding, SET_DIVERSITY_EMBEDDINGS)
        check_choice("set_diversity_similarity", args.set_diversity_similarity, SIMILARITIES)

    @classmethod
    def resolve_hooks(cls, args: Any, task: Any) -> dict[str, Any]:
        kind = args.set_diversity_embedding
        if kind == "auto" and has_hook(task, "embed") or kind == "task":
            if not has_hook(task, "embed"):
                refuse("set_diversity_embedding", "'task' needs a task with an `embed(completion, **row)` hook")
            return {"embed": checked_embed(task.embed)}
        return {}

    def shape_rewards(self, step: RewardStep) -> None:
        kind = self.args.set_diversity_embedding
        if kind == "auto":
            kind = "task" if self.hooks.embed is not None else "ngram"
        embeddings = step.embeddings(kind)
        valid = ~torch.isnan(embeddings).any(dim=1) & (step.primary > 0)
        credits = torch.zeros(len(embeddings))
        for start in range(0, len(embeddings), step.group):
            rows = slice(start, start + step.group)
            credits[rows] = leave_one_out_diversity(embeddings[rows].nan_to_num(0.0), valid[rows],
                                                    self.args.set_diversity_similarity)
        step.metrics["set_diversity/credit"].append(credits[valid].mean().item() if valid.any() else 0.0)
        step.bonus += self.args.set_diversity_coef * credits
