"""The recipes that ship inside the divrl package, and `divrl recipes`, which lists them and copies one out.

The checkout's `recipes/` folder is the package's `divrl/recipes` (a link in the source tree, files in the wheel), so
a pip install has them too. A recipe's name is its path under that folder without `.yaml`
(`embedded-cpu/hypospace-boolean/ips`); `divrl train NAME` (or `divrl train recipes/NAME.yaml` from a folder
without that file) trains the shipped recipe. Light: no torch, no yaml.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
from pathlib import Path

RECIPES = Path(__file__).parent / "recipes"
SUFFIX = ".yaml"
FOLDER = "recipes/"  # how the checkout, README and docs write a recipe's path
CLOSE_NAMES = 5  # close names an unknown recipe's error suggests


def recipe_names() -> list[str]:
    """Every shipped recipe's name, sorted: its path under `divrl/recipes` without `.yaml`."""
    return sorted(path.relative_to(RECIPES).with_suffix("").as_posix() for path in RECIPES.rglob(f"*{SUFFIX}"))


def where_to_look() -> str:
    """What an error about a recipe points the user to: the listing command and the shipped README."""
    return f"`divrl recipes` lists the shipped ones; {RECIPES / 'README.md'} says which reproduces what"


def shipped_recipe(name: str) -> Path | None:
    """The shipped recipe `name` names (`family/task/method`, with or without `recipes/` and `.yaml`), or None."""
    key = name.removeprefix(FOLDER).removesuffix(SUFFIX)
    path = RECIPES / f"{key}{SUFFIX}"
    return path if key and ".." not in Path(key).parts and path.is_file() else None


def unknown_recipe(name: str) -> ValueError:
    """The one-line error for `name`, neither a file nor a shipped recipe: its closest shipped names, where to look."""
    key = name.removeprefix(FOLDER).removesuffix(SUFFIX)
    close = difflib.get_close_matches(key, recipe_names(), n=CLOSE_NAMES, cutoff=0.6)
    hint = f"; close names: {', '.join(close)}" if close else ""
    return ValueError(f"recipe file {name!r} does not exist and is no shipped recipe's name{hint} ({where_to_look()})")


def resolve_recipe(name_or_path: str) -> str:
    """`name_or_path` when it is an existing file (or folder: the recipe loader names that problem), else the path
    of the shipped recipe it names; ValueError listing close names when it is neither."""
    if Path(name_or_path).exists():
        return name_or_path
    shipped = shipped_recipe(name_or_path)
    if shipped is None:
        raise unknown_recipe(name_or_path)
    return str(shipped)


def copy_recipe(name: str, destination: Path) -> Path:
    """Copy the shipped recipe `name` to `destination` (a file, or a folder that gets NAME's file name) and return the
    file written; ValueError when `name` is unknown or the file exists (nothing is overwritten)."""
    source = shipped_recipe(name)
    if source is None:
        raise unknown_recipe(name)
    target = destination / source.name if destination.is_dir() else destination
    if target.exists():
        raise ValueError(f"{str(target)!r} already exists: choose another destination (nothing was overwritten)")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def listing(contains: str = "") -> str:
    """`divrl recipes`: the shipped recipes' names whose name contains `contains`, one a line, and where they are."""
    names = [name for name in recipe_names() if contains in name]
    if not names:
        raise ValueError(f"no shipped recipe name contains {contains!r} ({where_to_look()})")
    return "\n".join([*names, "", f"{len(names)} recipes in {RECIPES} (README.md there says which reproduces what). "
                      "Train one by name: divrl train NAME [--field value]; copy it out to edit: divrl recipes copy "
                      "NAME [DEST]"])


def _copy(args: argparse.Namespace) -> int:
    print(f"divrl recipes: wrote {copy_recipe(args.name, Path(args.destination))}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl recipes [list [TEXT]]` and `divrl recipes copy NAME [DEST]`."""
    parser = subparsers.add_parser("recipes", help="List the shipped recipes, or copy one out to edit.",
                                   description="A recipe's name is its path under the shipped recipes folder, "
                                               "without .yaml: divrl train NAME trains it.")
    parser.set_defaults(func=lambda args: print(listing()) or 0)
    verbs = parser.add_subparsers(dest="recipes_command", metavar="VERB")
    show = verbs.add_parser("list", help="List the shipped recipes (those whose name contains TEXT).")
    show.add_argument("contains", nargs="?", default="", metavar="TEXT", help="e.g. embedded-cpu or /ips")
    show.set_defaults(func=lambda args: print(listing(args.contains)) or 0)
    copy = verbs.add_parser("copy", help="Copy a shipped recipe to DEST (default: this folder), to edit it.")
    copy.add_argument("name", help="the recipe's name, e.g. embedded-cpu/hypospace-boolean/ips")
    copy.add_argument("destination", nargs="?", default=".", metavar="DEST", help="a file, or a folder (default: .)")
    copy.set_defaults(func=_copy)
