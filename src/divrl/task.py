"""The task protocol: what a task module offers the trainers, the evaluators and the recipes.

Only `reward_funcs` is required. The optional hooks unlock methods: `outcome_key` for IPS,
`behavior` (with `behavior_dims`) for QD archives, `embed` for kNN novelty. Hooks receive the
completion as plain text plus the dataset row's columns as keyword arguments, must accept ANY string
(model output is untrusted) and return `None` for output they cannot read. An optional `stop_strings`
attribute (a tuple of strings) ends training completions there, as EOS does (`DivRLConfig.stop_strings`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Task(Protocol):
    """Minimal interface of a divrl task; see the module docstring for the optional hooks."""

    name: str

    def reward_funcs(self) -> list[Callable[..., list[float]]]:
        """TRL-compatible reward functions: `f(prompts, completions, **columns) -> list[float]`."""
        ...


def completion_text(completion: Any) -> str:
    """Plain text of a TRL completion: a string as is, a chat list as its assistant contents; "" otherwise.

    Multimodal content (a list of parts) contributes its "text" parts. Never raises, whatever it is given.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if not isinstance(completion, Sequence):
        return ""
    parts = []
    for message in completion:
        if not isinstance(message, Mapping) or message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, Sequence):
            parts.extend(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return "\n".join(parts)


def has_hook(task: Any, hook: str) -> bool:
    """Whether `task` implements the optional hook `hook` (e.g. "outcome_key", "behavior")."""
    return callable(getattr(task, hook, None))


OutcomeKey = Hashable | None
Descriptor = Sequence[float] | None


# Task name -> "module:factory" for recipes, `divrl train` and the evaluators; imported on first use.
TASKS: dict[str, str] = {
    "hypospace-causal": "divrl.tasks.hypospace.causal:CausalTask",
    "hypospace-voxel": "divrl.tasks.hypospace.voxel:VoxelTask",
    "hypospace-boolean": "divrl.tasks.hypospace.boolean:BooleanTask",
    "molecules": "divrl.tasks.molecules.task:MoleculeTask",
    "ideas": "divrl.tasks.toy.ideas:IdeasTask",
}


def task_names() -> list[str]:
    """Registered task names."""
    return sorted(TASKS)


def build_task(name: str, **params: Any) -> Any:
    """Instantiate the registered task `name` with `params`; unknown names list the valid ones."""
    import importlib

    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(task_names())}")
    module, factory = TASKS[name].split(":")
    try:
        return getattr(importlib.import_module(module), factory)(**params)
    except TypeError as error:
        raise ValueError(f"bad parameters {params} for task {name!r}: {error}") from error
