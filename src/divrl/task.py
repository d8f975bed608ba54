"""The task protocol: what a task module offers the trainers, the evaluators and the recipes.

Only `reward_funcs` is required. The optional hooks unlock methods: `outcome_key` for IPS,
`behavior` (with `behavior_dims`) for QD archives, `embed` for kNN novelty. Hooks receive the
completion as plain text plus the dataset row's columns as keyword arguments, must accept ANY string
(model output is untrusted) and return `None` for output they cannot read. An optional `stop_strings`
attribute (a tuple of strings) ends training completions there, as EOS does (`DivRLConfig.stop_strings`). An
optional `stop_reason()` method (no arguments, returns a one-line reason or None) is asked after every optimizer
step; a reason ends training there, with a checkpoint (e.g. the molecule task's spent `oracle_budget`). An optional
`begin_run(run_dir, resumed=...)` is called on every process when training starts, and an optional `journal_file`
names the file in the run folder where the task journals what it pays for as it goes (the molecule task's oracle
calls, `JOURNAL_FILE`): a folder holding one holds a run, and a resume reuses it. An optional
`recovery_eval_callback(trainer, held_out, *, instances, samples, max_new_tokens)` returns a transformers
`TrainerCallback` that measures held-out recovery while training (`recovery_eval` in `divrl train` and `divrl sft`
recipes; without the hook, `recovery_eval` is refused).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from divrl.tasks import TASKS

JOURNAL_FILE = "oracle_calls.jsonl"  # the molecule task's journal of real oracle calls, in a training run's folder


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


def read_prompts(path: Path, column: str) -> list[Any]:
    """Prompts from a JSONL file (one object per line holding `column`: a string or a list of chat messages)."""
    if path.is_dir():
        raise ValueError(f"prompts file {str(path)!r} is a directory: name the JSONL file in it (e.g. "
                         f"{str(path / 'exploration.jsonl')!r})")
    if not path.is_file():
        raise ValueError(f"prompts file {str(path)!r} does not exist")
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or column not in record:
            raise ValueError(f"{path}:{number}: expected an object with a {column!r} field")
        prompts.append(record[column])
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts


def resolve_prompt_style(style: str, has_chat_template: bool) -> str:
    """`prompt_style: auto` as every verb reads it: 'chat' when the model's tokenizer has a chat template, else
    'base'; 'chat' and 'base' as given."""
    if style != "auto":
        return style
    return "chat" if has_chat_template else "base"


def prompt_key(prompt: str | Sequence[dict[str, Any]]) -> str:
    """A stable string naming a prompt (text prompts as is, chat prompts as JSON): per-prompt archives and counts."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)


def has_hook(task: Any, hook: str) -> bool:
    """Whether `task` implements the optional hook `hook` (e.g. "outcome_key", "behavior")."""
    return callable(getattr(task, hook, None))


def task_names() -> list[str]:
    """Registered task names."""
    return sorted(TASKS)


def build_task(name: str, **params: Any) -> Any:
    """Instantiate task `name` with `params`: a registered name, or your own task as `package.module:Factory` or
    `path/to/task.py:Factory` (a class or function returning the task). The task is checked at once: it must have
    `reward_funcs()` and, to train from a recipe, `train_dataset(split, style, seed, limit, n_exemplars)` returning
    a `datasets.Dataset` with a `prompt` column. Every problem is a one-line ValueError naming it."""
    if name in TASKS:
        spec = TASKS[name]
    elif ":" in name:
        spec = name
    else:
        raise ValueError(f"unknown task {name!r}; choose one of: {', '.join(task_names())}, or give your own as "
                         "package.module:Factory or path/to/task.py:Factory")
    module_name, _, factory_name = spec.rpartition(":")
    module = _import_task_module(module_name, name)
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ValueError(f"task {name!r}: {module_name} has no class or function {factory_name!r}")
    try:
        task = factory(**params)
    except TypeError as error:
        raise ValueError(f"bad parameters {params} for task {name!r}: {error}") from error
    if not callable(getattr(task, "reward_funcs", None)):
        raise ValueError(f"task {name!r} has no reward_funcs() method: a task returns its TRL reward functions there "
                         "(see divrl.task.Task)")
    return task


def _import_task_module(module_name: str, name: str) -> Any:
    """The module of a task spec: a dotted import path, or a .py file (imported under a name of its own)."""
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    if module_name.endswith(".py") or "/" in module_name:
        path = Path(module_name).expanduser()
        if not path.is_file():
            raise ValueError(f"task {name!r}: file {str(path)!r} does not exist")
        module_key = f"divrl_user_task_{abs(hash(str(path.resolve())))}"
        if module_key in sys.modules:
            return sys.modules[module_key]
        spec = importlib.util.spec_from_file_location(module_key, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_key] = module  # dataclasses and pickling look the module up by name
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[module_key]
            raise ValueError(f"task {name!r}: importing {str(path)!r} failed: {type(error).__name__}: {error}") \
                from None
        return module
    try:
        return importlib.import_module(module_name)
    except Exception as error:  # an import error anywhere in the user's module: one line, not its traceback
        raise ValueError(f"task {name!r}: cannot import {module_name!r}: {type(error).__name__}: {error}") from None


TASK_ARG_HELP = ("a task setting, as under task_args in a recipe: KEY=VALUE, VALUE read as YAML (repeatable; "
                 "e.g. --task-arg max_depth=2)")


def add_task_arg_option(parser: Any) -> None:
    """Add `--task-arg KEY=VALUE` (also spelled `--task_arg`, as `divrl train` takes it; repeatable) to an argparse
    parser: the one way every verb takes a task's settings."""
    parser.add_argument("--task-arg", "--task_arg", dest="task_arg", action="append", default=[], metavar="KEY=VALUE",
                        help=TASK_ARG_HELP)


def parse_task_args(items: Sequence[str]) -> dict[str, Any]:
    """`--task-arg` items as a mapping, each VALUE parsed as YAML (a later KEY wins); ValueError naming an item that
    is not KEY=VALUE."""
    import yaml

    settings: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--task-arg expects KEY=VALUE, got {item!r}")
        settings[key.strip()] = yaml.safe_load(value)
    return settings


def merge_task_settings(flags: Mapping[str, Any], items: Sequence[str]) -> dict[str, Any]:
    """A verb's own task flags (aliases such as `divrl eval recovery --max-depth 2`: task keyword -> value, None when
    not given) merged with its `--task-arg` items; one setting given both ways with different values is a ValueError
    naming both."""
    merged = {key: value for key, value in flags.items() if value is not None}
    for key, value in parse_task_args(items).items():
        if key in merged and merged[key] != value:
            raise ValueError(f"task setting {key!r} is given twice with different values: {merged[key]!r} by its own "
                             f"option and {value!r} by --task-arg")
        merged[key] = value
    return merged
