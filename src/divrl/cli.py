"""The `divrl` command line: one subcommand per module, registered lazily so `divrl --help` is fast.

Each registered module defines `register(subparsers)` which adds its parser and sets
`func=handler` (a callable taking the parsed `argparse.Namespace` and returning an exit code).
Modules keep heavy imports (torch, trl, rdkit) inside their handlers.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import typing
from collections.abc import Sequence
from pathlib import Path

from divrl.quiet import quiet_console
from divrl.tasks import TASK_COMMANDS, TASK_EVAL_COMMANDS

# Top-level subcommands: name -> module with `register(subparsers)`; the tasks' own ones come from their table.
COMMANDS: dict[str, str] = {
    "demo": "divrl.demo",
    "doctor": "divrl.doctor",
    "methods": "divrl.settings_help",
    "recipes": "divrl.shipped_recipes",
    "fit-law": "divrl.analysis.law",
    "plot": "divrl.analysis.curves",
    "toy": "divrl.toy.cli",
    "train": "divrl.train",
    "sft": "divrl.sft",
    "prepare-model": "divrl.models",
    "sample-reference": "divrl.sample_reference_cli",
    **TASK_COMMANDS,
}

# `divrl eval <name>` subcommands: name -> module with `register(subparsers)`; the tasks' own evaluators first.
EVAL_COMMANDS: dict[str, str] = {
    **TASK_EVAL_COMMANDS,
    "task": "divrl.task_eval",
}


class OneLineErrors(argparse.ArgumentParser):
    """An argument parser (and, through `add_subparsers`, its subcommands') whose errors are one line naming the
    command and the problem, not the usage block before it."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the full parser, importing each subcommand module (all are light at import time)."""
    parser = OneLineErrors(prog="divrl", description="RL fine-tuning without diversity collapse.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).register(subparsers)
    if EVAL_COMMANDS:
        eval_parser = subparsers.add_parser(
            "eval", help="Evaluate models: a task's own evaluator, or any task's held-out prompts.")
        eval_sub = eval_parser.add_subparsers(dest="eval_command", metavar="EVALUATION")
        for module in EVAL_COMMANDS.values():
            importlib.import_module(module).register(eval_sub)
    return parser


def require_at_least(args: argparse.Namespace, **minimums: int) -> None:
    """Raise a ValueError naming the option when `args.<name>` is below its minimum."""
    for name, low in minimums.items():
        if getattr(args, name) < low:
            raise ValueError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")


def _check_writable_directory(directory: Path, out: str) -> None:
    """Create `directory` (and its parents) and create and delete a file in it; ValueError naming --out if not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise ValueError(f"--out {out!r} is not writable: {exc.strerror or exc} ({exc.filename or directory})") from exc


def output_file(out: str) -> Path:
    """`--out FILE`, checked before any work: not a directory, in a directory that exists (or is created) and
    takes new files, and writable if it exists; ValueError naming the problem otherwise."""
    path = Path(out).expanduser()
    if path.is_dir():
        raise ValueError(f"--out {out!r} is a directory; give a file path, e.g. {str(path / 'instances.jsonl')!r}")
    _check_writable_directory(path.parent, out)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"--out {out!r} exists and is not writable")
    return path


def output_directory(out: str) -> Path:
    """`--out DIR`, created and checked writable before any work; ValueError when it is a file or not writable."""
    path = Path(out).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {out!r} exists and is not a directory; give a directory for the results")
    _check_writable_directory(path, out)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `divrl` console script; bad input (ValueError, or a file that cannot be read or
    written: OSError) exits 2 with its message instead of a traceback."""
    quiet_console()  # before anything imports tqdm or bitsandbytes
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, OSError) as error:
        command = " ".join(filter(None, (args.command, getattr(args, "eval_command", None))))
        print(f"divrl {command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
