"""Early, one-line checks of a training recipe: each error names the field and where its value came from.

`divrl train` parses a recipe with TRL's `TrlParser`, which turns every YAML value into an argparse default.
Left alone, a value of the wrong type prints argparse's ~240-line usage, an unknown field suggests an API
flag (`fail_with_unknown_args=False`) users cannot set, and several bad values (task_args that are a list,
num_generations 0, a negative or NaN learning rate, save_steps 0, an output_dir that is a file, qd_dims that do
not match the task's behaviour dimensions, a split the task does not have) fail late or deep inside TRL, or (a
learning rate of 0) train nothing without a word. The checks here run before anything is built (types and
values) or right after the task is built and before the model loads (task-dependent settings); every failure is
a ValueError of one line:
`recipe FILE: FIELD ...` or `--FIELD on the command line: ...`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import math
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

PROMPT_STYLES = ("auto", "chat", "base", "clm")
_UNCONVERTIBLE = object()


@dataclasses.dataclass(frozen=True)
class RecipeOrigin:
    """Where the settings came from: the recipe file (if any) and the fields given on the command line."""

    path: str | None
    recipe_fields: frozenset[str] = frozenset()
    cli_fields: frozenset[str] = frozenset()

    @classmethod
    def of(cls, path: str | None, recipe: Mapping[str, Any], argv: Sequence[str]) -> RecipeOrigin:
        cli = {arg[2:].split("=", 1)[0].replace("-", "_") for arg in argv if arg.startswith("--")}
        return cls(path, frozenset(recipe), frozenset(cli - {"config"}))

    def where(self, name: str) -> str:
        """'recipe FILE: NAME' or '--NAME on the command line' (the command line overrides the recipe)."""
        if name in self.cli_fields:
            return f"--{name} on the command line" + (f" (recipe {self.path})" if self.path else "")
        if self.path:
            return f"recipe {self.path}: {name}"
        return name


def _fail(origin: RecipeOrigin, name: str, problem: str) -> typing.NoReturn:
    raise ValueError(f"{origin.where(name)} {problem}")


# ------------------------------------------------------------------------------------ types (before parsing)
def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arm) for arm in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (Any,)
        return f"a list of {_type_name(item)}"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string", dict: "a mapping"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a non-string YAML value fits the field's type (argparse converts only strings)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, arm) for arm in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin in (list, tuple) or hint in (list, tuple):
        args = typing.get_args(hint)
        item = args[0] if args else Any
        if isinstance(value, list):
            return all(_conforms(v, item) or isinstance(v, str) for v in value)
        return _conforms(value, item)  # argparse's nargs="+" also takes a single value
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint)
    return True  # a type these checks do not know: leave it to the dataclass


def _type_hints(dataclass_types: Iterable[type]) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for cls in dataclass_types:
        resolved = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            hints.setdefault(f.name, resolved.get(f.name, Any))
    return hints


def check_recipe_types(parser: argparse.ArgumentParser, dataclass_types: Iterable[type], recipe: Mapping[str, Any],
                       origin: RecipeOrigin) -> None:
    """Every recipe field is known and of its field's type (strings must convert as argparse would)."""
    actions = {action.dest: action for action in parser._actions}
    hints = _type_hints(dataclass_types)
    for name, value in recipe.items():
        if name == "env":  # TrlParser's own key: environment variables
            continue
        if name not in actions or name not in hints:
            close = difflib.get_close_matches(name, list(hints), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            _fail(origin, name, f"is not a recipe field{hint} (`python -m divrl.train --help` lists them all)")
        action, hint = actions[name], hints[name]
        if isinstance(value, str) and callable(action.type) and action.type is not str:
            try:
                converted = action.type(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                converted = _UNCONVERTIBLE
            if converted is _UNCONVERTIBLE:
                _fail(origin, name, f"must be {_type_name(hint)}, got {value!r}")
        else:
            converted = value
            if not _conforms(value, hint):
                _fail(origin, name, f"must be {_type_name(hint)}, got {value!r} ({type(value).__name__})")
        if action.choices is not None and isinstance(value, str) and converted not in action.choices:
            choices = ", ".join(repr(getattr(c, "value", c)) for c in action.choices)
            _fail(origin, name, f"must be one of {choices}, got {value!r}")


def one_line_errors(parser: argparse.ArgumentParser, origin: RecipeOrigin) -> None:
    """Make `parser` raise a one-line ValueError instead of printing its whole usage (~240 lines) on bad input, and
    check its parsed values (`check_parsed_values`) before the settings dataclasses are built from them."""

    def error(message: str) -> typing.NoReturn:
        source = "the command line" if origin.cli_fields or not origin.path else f"recipe {origin.path}"
        raise ValueError(f"{message} (from {source})")

    parse_known_args = parser.parse_known_args

    def parse_and_check(*args: Any, **kwargs: Any) -> tuple[argparse.Namespace, list[str]]:
        namespace, remaining = parse_known_args(*args, **kwargs)
        check_parsed_values(namespace, origin)
        return namespace, remaining

    parser.error = error  # type: ignore[method-assign]
    parser.parse_known_args = parse_and_check  # type: ignore[method-assign]


def check_parsed_values(namespace: argparse.Namespace, origin: RecipeOrigin) -> None:
    """Values (from the recipe or the command line) that break the settings dataclasses as they are built, where no
    later check can see them: TRL's GRPOConfig divides by num_generations (0 ends in a ZeroDivisionError)."""
    generations = getattr(namespace, "num_generations", None)
    if generations is not None and generations < 2:
        _fail(origin, "num_generations", f"must be >= 2 (GRPO's advantages compare the completions of one prompt "
                                         f"with each other), got {generations!r}")


# ------------------------------------------------------------------------------------ values (after parsing)
def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# Numbers that must be >= 0 (and finite, as every number a user sets must be): a NaN or inf here trains NaN weights.
NON_NEGATIVE = ("beta", "weight_decay", "epsilon", "epsilon_high", "max_grad_norm", "adam_epsilon")


def _check_numbers(configs: Sequence[Any], origin: RecipeOrigin) -> None:
    """Every float the recipe or the command line sets is finite; the `NON_NEGATIVE` ones are >= 0;
    top_entropy_quantile is a share in [0, 1]."""
    for config in configs:
        for field in dataclasses.fields(config):
            value = getattr(config, field.name, None)
            if field.name not in origin.recipe_fields | origin.cli_fields or not isinstance(value, float):
                continue
            if not math.isfinite(value):
                _fail(origin, field.name, f"must be a finite number, got {value!r}")
            if field.name in NON_NEGATIVE and value < 0:
                _fail(origin, field.name, f"must be >= 0, got {value!r}")
            if field.name == "top_entropy_quantile" and not 0 <= value <= 1:
                _fail(origin, field.name, f"is the share of tokens kept, in [0, 1], got {value!r}")


def check_recipe_values(script_args: Any, training_args: Any, model_args: Any, origin: RecipeOrigin) -> None:
    """Values the dataclasses accept but training cannot use; checked before anything is built."""
    prompts = getattr(script_args, "train_prompts", None)
    if prompts is not None and not Path(prompts).expanduser().is_file():
        kind = "is a directory: name the JSONL file in it" if Path(prompts).expanduser().is_dir() else "does not exist"
        _fail(origin, "train_prompts", f"{prompts!r} {kind}")
    if not isinstance(script_args.task_args, dict):
        _fail(origin, "task_args", f"must be a mapping of task parameters (e.g. {{grid: 3}}), got "
                                   f"{script_args.task_args!r}")
    limit = script_args.instance_limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        _fail(origin, "instance_limit", f"must be a positive integer or null (all instances), got {limit!r}")
    if script_args.prompt_style not in PROMPT_STYLES:
        _fail(origin, "prompt_style", f"must be one of {', '.join(map(repr, PROMPT_STYLES))}, got "
                                      f"{script_args.prompt_style!r}")
    if not isinstance(script_args.split, str) or not script_args.split:
        _fail(origin, "split", f"must name a split of the task (e.g. 'train'), got {script_args.split!r}")
    if script_args.n_exemplars < 0:
        _fail(origin, "n_exemplars", f"must be >= 0, got {script_args.n_exemplars}")
    if not _finite(training_args.temperature) or training_args.temperature <= 0:
        _fail(origin, "temperature", f"must be a finite number > 0 (sampling divides the logits by it), got "
                                     f"{training_args.temperature!r}")
    if not _finite(training_args.learning_rate) or training_args.learning_rate <= 0:
        _fail(origin, "learning_rate", f"must be a finite number > 0 (0 trains nothing), got "
                                       f"{training_args.learning_rate!r}")
    for name in ("save_steps", "logging_steps", "eval_steps"):
        strategy = getattr(training_args, name.replace("_steps", "_strategy"), None)
        value = getattr(training_args, name, None)
        if getattr(strategy, "value", strategy) == "steps" and value is not None and not (_finite(value) and value > 0):
            _fail(origin, name, f"must be > 0 with {name.replace('_steps', '_strategy')}='steps' (a number of "
                                f"steps, or a fraction of the run below 1), got {value!r}")
    if training_args.use_vllm and training_args.population and script_args.quantize != "none":
        _fail(origin, "quantize", f"{script_args.quantize!r} with population and use_vllm: TRL syncs each member's "
              "LoRA to vLLM by merging it into the base and unmerging it, which requantises a 4-bit base at every "
              "member switch; set quantize: none (a bf16 base, as in the recipes/*-vllm families) or use_vllm: false")
    if model_args.use_peft:
        from divrl.models import LORA_OPTIONS_REFUSED

        for option, (method, reason) in LORA_OPTIONS_REFUSED.items():
            if getattr(training_args, method, False) and getattr(model_args, option, None):
                _fail(origin, option, f"cannot be used with {method}: {reason}")
    output_dir = Path(training_args.output_dir).expanduser()
    blocking = next((p for p in (output_dir, *output_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        problem = "is an existing file" if blocking == output_dir else f"lies under {blocking}, which is a file"
        _fail(origin, "output_dir", f"{training_args.output_dir!r} {problem}, not a directory")
    _check_numbers((script_args, training_args, model_args), origin)  # after the fields with their own message


def check_task_settings(task: Any, script_args: Any, training_args: Any, origin: RecipeOrigin) -> None:
    """Settings that depend on the task, checked after it is built and before the model loads: each enabled
    method's settings against the task (e.g. the QD grid against its behaviour dimensions), and the split,
    instance_limit and n_exemplars against its dataset."""
    from divrl.methods import active  # the methods import torch: the recipe's other checks run without it
    from divrl.methods.hooks import FieldProblem

    for method in active(training_args):
        try:
            method.check_task(training_args, task)
        except FieldProblem as problem:
            _fail(origin, problem.field, f"{problem.problem} (task {script_args.task!r})")
    style = "base" if script_args.prompt_style == "auto" else script_args.prompt_style  # styles only format
    if not callable(getattr(task, "train_dataset", None)):
        _fail(origin, "task", f"{script_args.task!r} has no train_dataset(split, style, seed, limit, n_exemplars) "
                              "method: training from a recipe builds its prompts with it (see divrl.task)")
    try:
        task.train_dataset(split=script_args.split, style=style, seed=script_args.split_seed,
                           limit=script_args.instance_limit, n_exemplars=script_args.n_exemplars)
    except ValueError as error:
        names = ("split", "instance_limit", "n_exemplars")
        named = next((n for n in names if n in str(error) or n.replace("_", " ") in str(error)), None)
        if named is not None:
            _fail(origin, named, f"{getattr(script_args, named)!r} does not fit task {script_args.task!r}: {error}")
        settings = ", ".join(f"{n}={getattr(script_args, n)!r}" for n in names)
        where = f"recipe {origin.path}: " if origin.path else ""
        raise ValueError(f"{where}the dataset settings {settings} do not fit task {script_args.task!r}: "
                         f"{error}") from None


def _prompt_tokens(tokenizer: Any, prompt: Any) -> int:
    """How many tokens `prompt` (text, or chat messages rendered with the generation prompt) takes."""
    if isinstance(prompt, str):
        return len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if isinstance(ids, Mapping) else ids)


def check_context_length(model: Any, tokenizer: Any, dataset: Any, training_args: Any, origin: RecipeOrigin) -> None:
    """Refuse a max_completion_length that cannot fit in the model's context (max_position_embeddings) after the
    longest training prompt, once the model and dataset are loaded and before training: generation would run past
    the positions the model has (slowly, for a huge value) or fail inside the first step."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    context = getattr(config, "max_position_embeddings", None)
    wanted = training_args.max_completion_length
    if not isinstance(context, int) or wanted is None:
        return
    longest = 0 if wanted >= context else max(  # past the context whatever the prompts: no need to measure them
        (_prompt_tokens(tokenizer, prompt) for prompt in {repr(p): p for p in dataset["prompt"]}.values()), default=0)
    if wanted > context - longest:
        _fail(origin, "max_completion_length",
              f"is {wanted}, but the model's context is {context} tokens (max_position_embeddings)"
              + (f" and the longest training prompt takes {longest}: at most {context - longest} remain for a "
                 "completion" if longest else ""))
