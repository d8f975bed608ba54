"""What `divrl train --help` and `divrl methods` print: divrl's own settings, grouped by method, from the registry.

TRL's full parser help (`divrl train --help-all`) lists some 300 fields; a user looking for the IPS or MaxEnt fields
should not have to read it. These listings are generated from the dataclasses the recipes are parsed into (the task
arguments, `RunFields` and each registered method's `Config`), so they cannot drift from what `divrl train` accepts.

The registry imports torch (its methods' modules do), which takes seconds; help should take well under one. So what
the listings read of the registry (`registry_index`) ships as `help_index.json` beside this module, with a digest of
the sources it was read from: when they changed since (a new method, an edited field), the listings read the live
registry instead, and tests/cli/test_cli_help.py fails until `python -m divrl.settings_help` writes the index again.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).parent
HELP_INDEX = PACKAGE / "help_index.json"
# The sources the index is read from: the methods, the core they import constants from, divrl's own run fields.
INDEX_SOURCES = ("methods/*.py", "core/*.py", "trainers/_fields.py")
HELP_WIDTH = 120  # characters a listing's line wraps at (a field's description continues under itself)
DEFAULT_WIDTH = 16  # at most this many characters of the defaults' column; a longer default pushes its line right


def first_sentence(text: str) -> str:
    """The first sentence of a field's help, without a closing 'Default ...' sentence; never cut short."""
    sentence = re.split(r"(?<=[.!?])(?<!e\.g\.)(?<!i\.e\.)\s+(?=[A-Z`'\"(])", " ".join(text.split()), maxsplit=1)[0]
    return re.sub(r"\s*Default\b.*$", "", sentence).rstrip()


def _default(spec: dataclasses.Field) -> str:
    """A field's default as a recipe would write it (a preset's `Unset` marker shows its value)."""
    if spec.default is not dataclasses.MISSING:
        return str(spec.default)
    if spec.default_factory is not dataclasses.MISSING:
        return str(spec.default_factory())
    return "(required)"


def field_rows(*configs: type) -> list[list[str]]:
    """[name, default, help] of each field of the dataclasses `configs` that a recipe sets."""
    return [[spec.name, _default(spec), spec.metadata.get("help", "")]
            for config in configs for spec in dataclasses.fields(config) if spec.init]


def field_lines(rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Each of `field_rows`' rows as --name, default and the first sentence of its help, aligned and wrapped at
    HELP_WIDTH (the sentence continues under itself, whole)."""
    width = max((len(name) for name, _, _ in rows), default=0) + 2
    default_width = min(max((len(default) for _, default, _ in rows), default=0), DEFAULT_WIDTH)
    lines: list[str] = []
    for name, default, help_text in rows:
        head = f"{indent}--{name:<{width}}{default:<{default_width}}  "
        sentence = first_sentence(help_text)
        if not sentence:
            lines.append(head.rstrip())
            continue
        column = " " * min(len(head), len(indent) + 2 + width + default_width + 2)
        lines += textwrap.wrap(sentence, HELP_WIDTH, initial_indent=head, subsequent_indent=column,
                               break_long_words=False, break_on_hyphens=False)
    return lines


def method_header(method: Any) -> str:
    """`title  [name; on with --switch; stage S]`, from the method's cards and registry entry."""
    cards = method.cards()
    title = " / ".join(dict.fromkeys(card.name for card in cards)) or method.name
    return f"{title}  [{method.name}; on with --{method.switch}; stage {method.stage.value}]"




def _papers(method: Any) -> list[str]:
    """Each distinct paper of the method's cards: title and arXiv id, else 'divrl' when it has none."""
    papers = {card.paper["title"]: card.paper["id"] for card in method.cards()}
    return [f"{title} (arXiv:{arxiv})" if arxiv else title for title, arxiv in papers.items()] or ["divrl"]


def sources_digest() -> str:
    """sha256 of INDEX_SOURCES' files (names and contents): what tells a shipped index from a stale one."""
    digest = hashlib.sha256()
    for path in sorted(path for pattern in INDEX_SOURCES for path in PACKAGE.glob(pattern)):
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def registry_index() -> dict[str, Any]:
    """What the listings read of the live registry (importing torch): divrl's run fields and, in registry order,
    each method's header, module docstring (what it does), papers and fields."""
    from divrl.methods import REGISTRY
    from divrl.trainers._fields import RunFields

    return {"sources": sources_digest(), "run_fields": field_rows(RunFields),
            "methods": [{"header": method_header(method), "doc": sys.modules[method.__module__].__doc__ or "",
                         "papers": _papers(method), "fields": field_rows(method.Config)}
                        for method in REGISTRY.values()]}


def help_index() -> dict[str, Any]:
    """The shipped HELP_INDEX when it was read from the sources installed here, else `registry_index()` (slow)."""
    try:
        index = json.loads(HELP_INDEX.read_text())
    except (OSError, ValueError):
        index = {}
    return index if index.get("sources") == sources_digest() else registry_index()


def methods_text(with_papers: bool, index: dict[str, Any] | None = None) -> str:
    """Every registered method, in registry order, with its fields; `with_papers` adds what it does and its papers."""
    index = index or help_index()
    lines: list[str] = []
    for method in index["methods"]:
        lines += ["", method["header"]]
        if with_papers:
            lines += textwrap.wrap(f"what: {first_sentence(method['doc'])}", HELP_WIDTH, initial_indent="  ",
                                   subsequent_indent=" " * 8)
            lines += [f"  paper: {paper}" for paper in method["papers"]]  # a title stays whole: searched for as is
        lines += field_lines(method["fields"], indent="    " if with_papers else "  ")
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


if __name__ == "__main__":  # python -m divrl.settings_help: write the index from the live registry
    HELP_INDEX.write_text(json.dumps(registry_index(), indent=1) + "\n")
    print(f"wrote {HELP_INDEX}")
