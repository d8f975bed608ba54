"""What `divrl train --help` and `divrl methods` print: divrl's own settings, grouped by method, from the registry.

TRL's full parser help (`divrl train --help-all`) lists some 300 fields; a user looking for the IPS or MaxEnt fields
should not have to read it. These listings are generated from the dataclasses the recipes are parsed into (the task
arguments, `RunFields` and each registered method's `Config`), so they cannot drift from what `divrl train` accepts,
and they import neither TRL nor the models.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from typing import Any

ONE_LINE = 96  # characters of a field's description kept on its line


def first_sentence(text: str, limit: int = ONE_LINE) -> str:
    """The first sentence of a field's help, without a closing 'Default ...' sentence, cut to `limit` characters."""
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z`'\"(])", " ".join(text.split()), maxsplit=1)[0]
    sentence = re.sub(r"\s*Default\b.*$", "", sentence).rstrip()
    return sentence if len(sentence) <= limit else sentence[: limit - 3].rsplit(" ", 1)[0] + "..."


def _default(spec: dataclasses.Field) -> str:
    """A field's default as a recipe would write it (a preset's `Unset` marker shows its value)."""
    if spec.default is not dataclasses.MISSING:
        return str(spec.default)
    if spec.default_factory is not dataclasses.MISSING:
        return str(spec.default_factory())
    return "(required)"


def field_lines(*configs: type, indent: str = "  ") -> list[str]:
    """One line per field of the dataclasses `configs`, aligned: --name, default, the first sentence of its help."""
    specs = [spec for config in configs for spec in dataclasses.fields(config) if spec.init]
    width = max((len(spec.name) for spec in specs), default=0) + 2
    default_width = min(max((len(_default(spec)) for spec in specs), default=0), 16)
    return [f"{indent}--{spec.name:<{width}}{_default(spec):<{default_width}}  "
            f"{first_sentence(spec.metadata.get('help', ''))}".rstrip() for spec in specs]


def method_header(method: Any) -> str:
    """`name (switch: --field): what it is`, from the method's card and its module's docstring."""
    cards = method.cards()
    title = " / ".join(dict.fromkeys(card.name for card in cards)) or method.name
    return f"{title}  [{method.name}; on with --{method.switch}; stage {method.stage.value}]"


def _summary(method: Any) -> str:
    """The first sentence of the method's module docstring: what it does."""
    doc = sys.modules[method.__module__].__doc__ or ""
    return first_sentence(doc, limit=400)


def _papers(method: Any) -> list[str]:
    """Each distinct paper of the method's cards: title and arXiv id, else 'divrl' when it has none."""
    papers = {card.paper["title"]: card.paper["id"] for card in method.cards()}
    return [f"{title} (arXiv:{arxiv})" if arxiv else title for title, arxiv in papers.items()] or ["divrl"]


def methods_text(with_papers: bool) -> str:
    """Every registered method, in registry order, with its fields; `with_papers` adds what it does and its papers."""
    from divrl.methods import REGISTRY

    lines: list[str] = []
    for method in REGISTRY.values():
        lines += ["", method_header(method)]
        if with_papers:
            lines += [f"  what: {_summary(method)}", *(f"  paper: {p}" for p in _papers(method))]
        lines += field_lines(method.Config, indent="    " if with_papers else "  ")
    return "\n".join(lines)


def list_methods() -> str:
    """`divrl methods`: each method's fields, what it does and its papers."""
    return ("divrl's methods, in the order they run within a step; switch one on in a recipe or with --field value:\n"
            + methods_text(with_papers=True))


class PrintAndExit(argparse.Action):
    """An option that prints `text(parser)` and exits 0, as --help does."""

    def __init__(self, option_strings: list[str], dest: str, text: Any, help: str | None = None) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)
        self.text = text

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: str | None = None) -> None:
        print(self.text(parser))
        parser.exit()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl methods`."""
    parser = subparsers.add_parser("methods", help="List divrl's methods: their fields, defaults and papers.")
    parser.set_defaults(func=lambda args: print(list_methods()) or 0)
