"""The task protocol: what a task module offers the trainers, the evaluators and the recipes.

Only `reward_funcs` is required. The optional hooks unlock methods: `outcome_key` for IPS,
`behavior` (with `behavior_dims`) for QD archives, `embed` for kNN novelty. Hooks receive the
completion as plain text plus the dataset row's columns as keyword arguments, must accept ANY string
(model output is untrusted) and return `None` for output they cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Task(Protocol):
    """Minimal interface of a divrl task; see the module docstring for the optional hooks."""

    name: str

    def reward_funcs(self) -> list[Callable[..., list[float]]]:
        """TRL-compatible reward functions: `f(prompts, completions, **columns) -> list[float]`."""
        ...


def has_hook(task: Any, hook: str) -> bool:
    """Whether `task` implements the optional hook `hook` (e.g. "outcome_key", "behavior")."""
    return callable(getattr(task, hook, None))


OutcomeKey = Hashable | None
Descriptor = Sequence[float] | None
