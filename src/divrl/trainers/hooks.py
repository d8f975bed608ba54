"""The task hooks a trainer calls per completion (outcome keys, behaviour descriptors, embeddings).

Resolved and checked once, at trainer construction, so a method needing a hook the task lacks fails
before any model is loaded, with a message naming the config field.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from divrl.task import has_hook

logger = logging.getLogger(__name__)

# Row columns never forwarded to hooks: they would clash with the positional completion argument.
_EXCLUDED_COLUMNS = ("completion", "completion_ids")


def normalized_text_key(completion: str, **_: Any) -> str | None:
    """Default IPS outcome key: the completion with whitespace collapsed and case folded; None if empty."""
    key = " ".join(completion.split()).casefold()
    return key or None


def hook_columns(row: dict[str, Any]) -> dict[str, Any]:
    """The dataset columns of one row as hook keyword arguments."""
    return {k: v for k, v in row.items() if k not in _EXCLUDED_COLUMNS}


@dataclass(frozen=True)
class TaskHooks:
    """Per-completion callables `hook(completion_text, **row_columns)` chosen for the enabled methods."""

    outcome_key: Callable[..., Hashable | None] | None = None
    behavior: Callable[..., Sequence[float] | None] | None = None
    behavior_dims: int | None = None
    embed: Callable[..., Sequence[float] | None] | None = None
    # The task's own outcome key whatever the methods (the collapse metrics of every run use it).
    task_outcome_key: Callable[..., Hashable | None] | None = None


def _fail(field: str, problem: str) -> None:
    raise ValueError(f"DivRLConfig.{field}: {problem}")


def _checked_outcome_key(hook: Callable[..., Any]) -> Callable[..., Hashable | None]:
    """`hook` refusing, with a message naming it, a key that IPS cannot count (not hashable)."""

    def outcome_key(completion: str, **row: Any) -> Hashable | None:
        key = hook(completion, **row)
        try:
            hash(key)
        except TypeError:
            raise ValueError(f"task.outcome_key returned an unhashable {type(key).__name__} ({key!r:.80}) for "
                             f"completion {completion!r:.80}: return a str, int, tuple or None") from None
        return key

    return outcome_key


def _checked_behavior(hook: Callable[..., Any], dims: int) -> Callable[..., Sequence[float] | None]:
    """`hook` refusing, with a message naming it, anything but None or `dims` finite numbers."""

    def behavior(completion: str, **row: Any) -> Sequence[float] | None:
        descriptor = hook(completion, **row)
        if descriptor is None:
            return None
        try:
            values = [float(v) for v in descriptor]
        except (TypeError, ValueError):
            values = []
        if len(values) != dims or not all(math.isfinite(v) for v in values):
            raise ValueError(f"task.behavior returned {descriptor!r:.80} for completion {completion!r:.80}: expected "
                             f"None or {dims} finite numbers (the archive's dimensions, DivRLConfig.qd_dims / "
                             "task.behavior_dims)")
        return values

    return behavior


def _checked_embed(hook: Callable[..., Any]) -> Callable[..., Sequence[float] | None]:
    """`hook` refusing, with a message naming it, anything but None or a flat sequence of numbers."""

    def embed(completion: str, **row: Any) -> Sequence[float] | None:
        vector = hook(completion, **row)
        if vector is None:
            return None
        try:
            return [float(v) for v in vector]
        except (TypeError, ValueError):
            raise ValueError(f"task.embed returned {vector!r:.80} for completion {completion!r:.80}: expected None "
                             "or a flat sequence of numbers (DivRLConfig.novelty_embedding='task')") from None

    return embed


def resolve_task_hooks(args: Any, task: Any | None) -> TaskHooks:
    """Pick the hooks the enabled methods need from `task`, raising a ValueError naming the field otherwise."""
    task_outcome_key = _checked_outcome_key(task.outcome_key) if has_hook(task, "outcome_key") else None
    outcome_key = None
    embed = None
    if args.semantic_keys_enabled and args.semantic_embedding == "task":
        if not has_hook(task, "embed"):
            _fail("semantic_embedding", "'task' needs a task with an `embed(completion, **row)` hook")
        embed = _checked_embed(task.embed)
    if (args.ips or args.count_bonus_enabled) and not args.semantic_keys_enabled:  # semantic keys: batch-level
        source = args.ips_outcome_key
        if source == "task" and not has_hook(task, "outcome_key"):
            _fail("ips_outcome_key", "'task' needs a task object with an `outcome_key(completion, **row)` hook")
        if source == "text" or (source == "auto" and not has_hook(task, "outcome_key")):
            if source == "auto":
                logger.warning(
                    "IPS / count bonus: the task has no `outcome_key` hook; using the normalised completion text as "
                    "the outcome (distinct texts count as distinct outcomes). Set ips_outcome_key='text' to silence "
                    "this."
                )
            outcome_key = normalized_text_key
        else:
            outcome_key = task_outcome_key

    behavior, behavior_dims = None, None
    if args.qd:
        if not has_hook(task, "behavior"):
            _fail("qd", "needs a task with a `behavior(completion, **row)` hook returning a descriptor in [0,1]^d")
        task_dims = getattr(task, "behavior_dims", None)
        if task_dims is None and args.qd_dims is None:
            _fail("qd_dims", "is needed when the task does not declare `behavior_dims`")
        if task_dims is not None and not (isinstance(task_dims, int) and task_dims >= 1):
            _fail("qd", f"task.behavior_dims must be a positive int, got {task_dims!r}")
        if task_dims is not None and args.qd_dims is not None and len(args.qd_dims) != task_dims:
            _fail("qd_dims", f"has {len(args.qd_dims)} dimensions but task.behavior_dims is {task_dims}")
        behavior_dims = task_dims if task_dims is not None else len(args.qd_dims)
        behavior = _checked_behavior(task.behavior, behavior_dims)
        if args.qd_ranges is not None and len(args.qd_ranges) != behavior_dims:
            _fail("qd_ranges", f"has {len(args.qd_ranges)} ranges for {behavior_dims} behaviour dimensions")

    if args.novelty_enabled and args.novelty_embedding == "task":
        if not has_hook(task, "embed"):
            _fail("novelty_embedding", "'task' needs a task with an `embed(completion, **row)` hook")
        embed = _checked_embed(task.embed)
    return TaskHooks(outcome_key=outcome_key, behavior=behavior, behavior_dims=behavior_dims, embed=embed,
                     task_outcome_key=task_outcome_key)
