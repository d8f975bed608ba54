"""The task hooks a trainer calls per completion (outcome keys, behaviour descriptors, embeddings).

Resolved and checked once, at trainer construction, so a method needing a hook the task lacks fails
before any model is loaded, with a message naming the config field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from divrl.methods.base import active
from divrl.task import has_hook

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
    augment: Callable[..., str] | None = None  # `augment(completion, rng, **row)`: the same outcome written anew
    # The task's own outcome key whatever the methods (the collapse metrics of every run use it).
    task_outcome_key: Callable[..., Hashable | None] | None = None


class FieldProblem(ValueError):
    """A method's config field that does not fit the task: `field` names it, `problem` says why."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"DivRLConfig.{field}: {problem}")
        self.field, self.problem = field, problem


def refuse(field: str, problem: str) -> NoReturn:
    """Raise the error of a method whose config field `field` needs a hook, or a shape, the task lacks."""
    raise FieldProblem(field, problem)


def checked_outcome_key(hook: Callable[..., Any]) -> Callable[..., Hashable | None]:
    """`hook` refusing, with a message naming it, a key that IPS cannot count (not hashable)."""

    def outcome_key(completion: str, **row: Any) -> Hashable | None:
        key = hook(completion, **row)
        try:
            hash(key)
        except TypeError:
            raise ValueError(f"task.outcome_key returned an unhashable {type(key).__name__} ({key!r:.80}) for "
                             f"completion {completion!r:.80}: return a str, int, tuple or None") from None
        return key

    outcome_key.__wrapped__ = hook  # type: ignore[attr-defined]  # so that users of one task hook share one check
    return outcome_key


def checked_behavior(hook: Callable[..., Any], dims: int) -> Callable[..., Sequence[float] | None]:
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


def checked_embed(hook: Callable[..., Any]) -> Callable[..., Sequence[float] | None]:
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
    """Collect the hooks the enabled methods need from `task` (each method checks its own and raises a ValueError
    naming its field when the task lacks one), plus the task's own outcome key for the collapse metrics."""
    needed: dict[str, Any] = {}
    for method in active(args):
        needed.update(method.resolve_hooks(args, task))
    task_outcome_key = None
    if has_hook(task, "outcome_key"):
        shared = needed.get("outcome_key")  # IPS and the collapse metrics share the task's checked hook
        task_outcome_key = (shared if getattr(shared, "__wrapped__", None) == task.outcome_key
                            else checked_outcome_key(task.outcome_key))
    return TaskHooks(**needed, task_outcome_key=task_outcome_key)
