"""Helpers for the documented dataclass fields of the methods' configs (and of `DivRLConfig`'s own): help metadata,
the `Unset` default a preset may fill, and the checks that name the field."""

from __future__ import annotations

from typing import Any


def _help(text: str) -> dict[str, str]:
    """Field metadata carrying the help text TrlParser shows for `--field`."""
    return {"help": text}


class Unset:
    """Default of a field that a preset trainer may fill in (e.g. `novelty_coef` for MaxEntGRPOTrainer).

    `DivRLConfig.__post_init__` replaces it by `value` and records the field as not set by the user, so a
    value the user gives (even one equal to the default) is never overwritten by a preset. It is a distinct
    object, not a value: HfArgumentParser / TrlParser hand a field's default through unchanged when the flag
    or recipe key is absent, so the same rule holds for configs built in Python and from recipes or the CLI.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)

    def __str__(self) -> str:
        return str(self.value)


def check(condition: bool, name: str, problem: str) -> None:
    """Raise `ValueError("DivRLConfig.<name> <problem>")` unless `condition`."""
    if not condition:
        raise ValueError(f"DivRLConfig.{name} {problem}")


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    """Refuse a value of field `name` outside `choices`, listing them."""
    check(value in choices, name, f"must be one of {', '.join(map(repr, choices))}; got {value!r}")
