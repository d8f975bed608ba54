"""Shared helpers for the documented dataclass fields of DivRLConfig and its methods' configs, and their checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONSOLE_LOGS = ("trl", "compact")


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


@dataclass
class RunFields:
    """divrl's own fields of `DivRLConfig` that belong to no method (light: `divrl train --help` lists them without
    importing TRL)."""

    # --- Where a completion ends (divrl) ---
    stop_strings: list[str] | None = field(default=None, metadata=_help(
        "Strings that end a completion, as EOS does: generation stops at the first one (transformers "
        "`stop_strings`, vLLM `stop`), the tokens after it are masked out of the loss, and the reward functions "
        "read the text up to and including it. None = the task's `stop_strings` (HypoSpace: the END line that "
        "closes each worked example of its base prompts); [] = none. divrl choice. Default None."))

    # --- Console (divrl) ---
    console_log: str = field(default="trl", metadata=_help(
        "What the console shows at each logging step: 'trl' = transformers' progress bar and the full metric dict "
        "(TRL's behaviour); 'compact' = one line (step, validity, distinct valid answers per group (the mean over "
        "groups), entropy, seconds) at each logged step and at the first and last, with "
        "every metric appended to <output_dir>/metrics.jsonl as it is logged. divrl choice. Default 'trl'."))
