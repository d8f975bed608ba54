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
    return f"{type(value).__name__} {value!r}" if len(repr(value)) <= 40 else type(value).__name__


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


def _problem(value: Any, hint: Any, top: bool = True) -> str | None:
    """Why `value` does not fit type hint `hint` ('must be ...', or '[i] must be ...' for an item of a sequence), or
    None when it does (or `hint` is not checked). A float argument must be finite; a float inside a sequence, like
    a tensor's entries, may be NaN."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, TypeVar):
        return None
    if origin in (typing.Union, types.UnionType):
        problems = [_problem(value, option, top) for option in args]
        if all(problems):
            return next((p for p in problems if p.startswith("[") or "finite" in p),
                        f"must be {_name(hint)}, got {_describe(value)}")
        return None
    if hint is type(None):
        return None if value is None else f"must be None, got {_describe(value)}"
    if origin is typing.Literal:
        return None if value in args else f"must be one of {', '.join(map(repr, args))}, got {_describe(value)}"
    if hint is bool:
        return None if isinstance(value, bool) else f"must be a bool, got {_describe(value)}"
    if hint is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return None if ok else f"must be an integer, got {_describe(value)}"
    if hint is float:
        if torch.is_tensor(value) and value.dim() == 0 and not value.is_complex():
            value = value.item()  # a tensor scalar passes as a number
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            return f"must be a number, got {_describe(value)}"
        return None if math.isfinite(value) or not top else f"must be a finite number, got {value}"
    if hint is str:
        return None if isinstance(value, str) else f"must be a string, got {_describe(value)}"
    if hint is torch.Tensor:
        return None if torch.is_tensor(value) else f"must be a torch.Tensor, got {_describe(value)}"
    if hint is Hashable:
        return None if isinstance(value, Hashable) else f"must be hashable, got {_describe(value)}"
    if origin is tuple:
        if not isinstance(value, (tuple, list)) or (args and args[-1] is not Ellipsis and len(value) != len(args)):
            return f"must be a tuple of {len(args)}, got {_describe(value)}"
        inner = args[:1] * len(value) if args and args[-1] is Ellipsis else args
        return next((f"[{i}] {p}" for i, (item, h) in enumerate(zip(value, inner))
                     if (p := _problem(item, h, top=False))), None)
    if origin in (Sequence, list) or hint in (Sequence, list):
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) and args and args[0] is not Any:
            return f"must be {_name(hint)}, got {_describe(value)}"
        return _items_problem(value, args)
    if inspect.isclass(hint) and origin is None and not isinstance(value, hint):  # e.g. AddStatus
        return f"must be {_name(hint)}, got {_describe(value)}"
    if origin is Iterable or hint is Iterable:
        return None if isinstance(value, Iterable) else f"must be iterable, got {_describe(value)}"
    if origin is Mapping or origin is dict or hint in (Mapping, dict):
        if not isinstance(value, Mapping):
            return f"must be a mapping, got {_describe(value)}"
        return _items_problem(list(value.values()), args[1:])
    return None


def _items_problem(items: Sequence[Any], args: tuple[Any, ...]) -> str | None:
    """The first item of `items` that does not fit the element hint `args[0]`, as '[i] must be ...'."""
    if not args:
        return None
    return next((f"[{i}] {p}" for i, item in enumerate(items) if (p := _problem(item, args[0], top=False))), None)


def checked(function: F) -> F:
    """Check every argument of `function` against its type hint (resolved on the first call), raising a TypeError
    (wrong type) or ValueError (a non-finite float) that names the function and the argument."""
    signature = inspect.signature(function)
    hints: dict[str, Any] = {}

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not hints:
            hints.update(typing.get_type_hints(function))
            hints.pop("return", None)
        bound = signature.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            if name in hints and (problem := _problem(value, hints[name])):
                error = ValueError if "finite" in problem or "one of" in problem else TypeError
                raise error(f"{function.__qualname__}: {name}{'' if problem.startswith('[') else ' '}{problem}")
        return function(*args, **kwargs)

    return typing.cast(F, wrapper)
