"""Argument checks for divrl.core's public API, from each function's own type hints (issue 44).

`@checked` makes a wrongly typed argument a TypeError, and a non-finite number where a `float` is expected a
ValueError, each naming the argument, before the function runs: without it, a string or a None reached torch or numpy
and failed deep inside with an error about neither. Tensor contents are not checked here: NaN rewards and objectives
carry meaning (an unscored completion) in several functions, which document what they do with them.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
import types
import typing
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])


def _describe(value: Any) -> str:
    """`value` for an error message: its type, and its repr when that is short (a tensor's never is worth printing)."""
    if torch.is_tensor(value) and value.numel() > 4:
        return f"{type(value).__name__} of shape {tuple(value.shape)}"
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 else type(value).__name__


def _name(hint: Any) -> str:
    """How an error message names type hint `hint` ('a torch.Tensor', 'a sequence of numbers', ...)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    names = {bool: "a bool", int: "an integer", float: "a number", str: "a string", type(None): "None",
             torch.Tensor: "a torch.Tensor", Hashable: "hashable"}
    if hint in names:
        return names[hint]
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_name(option) for option in args)
    if origin is typing.Literal:
        return f"one of {', '.join(map(repr, args))}"
    if origin in (Sequence, list, Iterable, tuple):
        return f"a sequence of {_name(args[0]).removeprefix('a ').removeprefix('an ')}s" if args else "a sequence"
    if origin in (Mapping, dict):
        return "a mapping"
    return f"a {getattr(hint, '__name__', hint)}"


Check = Callable[[Any], "str | None"]


def _compile(hint: Any, top: bool = True) -> Check | None:
    """A function giving why a value does not fit type hint `hint` ('must be ...', or '[i] must be ...' for an item of
    a sequence), or None when it fits; None instead of a function where `hint` is not checked. Built once per
    argument, so a call pays only for the checks. A float argument must be finite; a float inside a sequence, like a
    tensor's entries, may be NaN."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, TypeVar):
        return None
    if origin in (typing.Union, types.UnionType):
        options = [_compile(option, top) for option in args]
        if any(check is None for check in options):
            return None  # an unchecked option takes any value
        # options that are an isinstance check alone, tried at once first (int excludes bool, float needs finite)
        plain = tuple(option for option in args
                      if inspect.isclass(option) and typing.get_origin(option) is None and option not in (int, float))
        return functools.partial(_union_problem, options, hint, plain)
    if hint is type(None):
        return lambda value: None if value is None else f"must be None, got {_describe(value)}"
    if origin is typing.Literal:
        return lambda value: (None if value in args else
                              f"must be one of {', '.join(map(repr, args))}, got {_describe(value)}")
    if hint is bool:
        return lambda value: None if isinstance(value, bool) else f"must be a bool, got {_describe(value)}"
    if hint is int:
        return lambda value: (None if isinstance(value, numbers.Integral) and not isinstance(value, bool) else
                              f"must be an integer, got {_describe(value)}")
    if hint is float:
        return functools.partial(_float_problem, top=top)
    if hint is str:
        return lambda value: None if isinstance(value, str) else f"must be a string, got {_describe(value)}"
    if hint is torch.Tensor:
        return lambda value: None if torch.is_tensor(value) else f"must be a torch.Tensor, got {_describe(value)}"
    if hint is Hashable:
        return lambda value: None if isinstance(value, Hashable) else f"must be hashable, got {_describe(value)}"
    if origin is tuple:
        return _tuple_check(hint, args)
    if origin in (Sequence, list) or hint in (Sequence, list):
        item = _compile(args[0], top=False) if args else None
        text_refused = bool(args) and args[0] is not Any

        def sequence_problem(value: Any) -> str | None:
            if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) and text_refused:
                return f"must be {_name(hint)}, got {_describe(value)}"
            return _item_problem(value, item)

        return sequence_problem
    if inspect.isclass(hint) and origin is None:  # e.g. AddStatus
        return lambda value: None if isinstance(value, hint) else f"must be {_name(hint)}, got {_describe(value)}"
    if origin is Iterable:
        return lambda value: None if isinstance(value, Iterable) else f"must be iterable, got {_describe(value)}"
    if origin in (Mapping, dict):
        values = _compile(args[1], top=False) if len(args) > 1 else None
        return lambda value: (_item_problem(list(value.values()), values) if isinstance(value, Mapping) else
                              f"must be a mapping, got {_describe(value)}")
    return None


def _union_problem(options: list[Check], hint: Any, plain: tuple[type, ...], value: Any) -> str | None:
    """None when `value` fits one of the options (an instance of a `plain` one, or the first other that fits), else
    the most telling problem: an item's or a non-finite number's, or 'must be A or B'."""
    if plain and isinstance(value, plain):
        return None
    problems = []
    for check in options:
        if (problem := check(value)) is None:
            return None
        problems.append(problem)
    return next((p for p in problems if p.startswith("[") or _is_value_error(p)),
                f"must be {_name(hint)}, got {_describe(value)}")


def _is_value_error(problem: str) -> bool:
    """Whether `problem` is a wrong value of the right type (a non-finite number, a value outside a Literal's
    choices), read from what it requires, not from the value it echoes after ', got'."""
    required = problem.split(", got ", 1)[0]
    return "finite" in required or "one of" in required


def _float_problem(value: Any, top: bool) -> str | None:
    """A number (a 0-d real tensor passes as one); finite where it is an argument itself (`top`)."""
    if torch.is_tensor(value) and value.dim() == 0 and not value.is_complex():
        value = value.item()
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        return f"must be a number, got {_describe(value)}"
    return None if math.isfinite(value) or not top else f"must be a finite number, got {value}"


def _tuple_check(hint: Any, args: tuple[Any, ...]) -> Check:
    """tuple[A, B] (that many items, each its own hint) or tuple[A, ...] (any number of A); a list passes too."""
    variadic = bool(args) and args[-1] is Ellipsis
    items = [_compile(h, top=False) for h in (args[:1] if variadic else args)]

    def tuple_problem(value: Any) -> str | None:
        if not isinstance(value, (tuple, list)) or (args and not variadic and len(value) != len(args)):
            return f"must be a tuple of {len(args)}, got {_describe(value)}"
        checks = items * len(value) if variadic else items
        return next((f"[{i}] {p}" for i, (item, check) in enumerate(zip(value, checks))
                     if check is not None and (p := check(item))), None)

    return tuple_problem


def _item_problem(items: Sequence[Any], check: Check | None) -> str | None:
    """The first item of `items` that `check` finds a problem with, as '[i] must be ...'."""
    if check is None:
        return None
    return next((f"[{i}] {p}" for i, item in enumerate(items) if (p := check(item))), None)


def checked(function: F) -> F:
    """Check every argument of `function` against its type hint (resolved on the first call), raising a TypeError
    (wrong type) or ValueError (a non-finite float) that names the function and the argument."""
    signature = inspect.signature(function)
    checks: dict[str, Check] = {}
    resolved = False

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal resolved
        if not resolved:
            hints = typing.get_type_hints(function)
            checks.update((name, check) for name, hint in hints.items()
                          if name != "return" and (check := _compile(hint)) is not None)
            resolved = True
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            if (check := checks.get(name)) is not None and (problem := check(value)):
                error = ValueError if _is_value_error(problem) else TypeError
                raise error(f"{function.__qualname__}: {name}{'' if problem.startswith('[') else ' '}{problem}")
        return function(*args, **kwargs)

    return typing.cast(F, wrapper)
