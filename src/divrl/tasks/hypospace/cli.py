"""`divrl hypospace generate`: write every observation set of a HypoSpace configuration as JSONL.

Instances are streamed to the file as they are enumerated, never held in memory together (grid 6 / height 6
held 470 MB before the first line was written). `--split all` without `--limit` is one pass; a split or a
limit needs the number of instances first, so it enumerates twice (a counting pass, then the writing pass).
The file appears complete or not at all: lines go to a `.partial` file renamed at the end.

Also the shared command-line pieces (task parameters, split options) that `divrl eval recovery` reuses.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from divrl.cli import output_file
from divrl.task import add_task_arg_option, build_task, merge_task_settings

if TYPE_CHECKING:
    from collections.abc import Iterator

    from divrl.tasks.hypospace import HypoSpaceTask, Instance

# Command-line option -> (domain, task constructor keyword).
DOMAIN_OPTIONS: dict[str, tuple[str, str]] = {
    "nodes": ("causal", "nodes"),
    "max_edges": ("causal", "max_edges"),
    "observations": ("causal", "observations"),
    "grid": ("voxel", "grid"),
    "max_height": ("voxel", "max_height"),
    "max_blocks": ("voxel", "max_blocks"),
    "fixed": ("voxel", "fixed"),
    "operators": ("boolean", "operators"),
    "max_depth": ("boolean", "max_depth"),
}


def add_task_arguments(parser: argparse.ArgumentParser) -> None:
    """Task parameters of all three domains (each only valid with its own domain) and split options."""
    causal = parser.add_argument_group("causal parameters")
    causal.add_argument("--nodes", type=int, help="number of nodes, 2..5 (default 3)")
    causal.add_argument("--max-edges", type=int, help="maximum edges per DAG (default: unrestricted)")
    causal.add_argument(
        "--observations", type=int, nargs="+", metavar="K", help="observations per set (default: every k from 1 to n)"
    )
    voxel = parser.add_argument_group("voxel parameters")
    voxel.add_argument("--grid", type=int, help="grid side G, 1..6 (default 3)")
    voxel.add_argument("--max-height", type=int, help="maximum layers H, 1..6 (default 3)")
    voxel.add_argument("--max-blocks", type=int, help="occupied top-view cells, up to this many (default 3)")
    voxel.add_argument("--fixed", action="store_true", default=None, help="exactly --max-blocks occupied cells")
    boolean = parser.add_argument_group("boolean parameters")
    boolean.add_argument("--operators", choices=["basic", "extended", "full"], help="operator set (default extended)")
    boolean.add_argument("--max-depth", type=int, help="maximum expression depth, 1..3 (default 2)")
    add_task_arg_option(parser)  # any of the above as KEY=VALUE, as under task_args in a recipe
    split = parser.add_argument_group("split")
    split.add_argument("--seed", type=int, default=0, help="split seed (default 0)")
    split.add_argument("--test-fraction", type=float, default=0.5, help="share of instances in the test split")
    split.add_argument("--limit", type=int, default=None, help="keep this many instances before splitting")


def task_from_args(domain: str, args: argparse.Namespace) -> Any:
    """Build the task of `domain` from parsed options: the domain's own flags (aliases of its task_args) and
    `--task-arg KEY=VALUE`; ValueError for an option of another domain or a setting the task does not take."""
    from divrl.tasks.hypospace import DOMAINS

    domain = domain.removeprefix("hypospace-")
    if domain not in DOMAINS:
        raise ValueError(f"unknown HypoSpace domain {domain!r}; choose one of {sorted(DOMAINS)}")
    flags = {}
    for option, (owner, keyword) in DOMAIN_OPTIONS.items():
        value = getattr(args, option, None)
        if value is None:
            continue
        if owner != domain:
            raise ValueError(f"--{option.replace('_', '-')} applies to the {owner} domain, not {domain}")
        flags[keyword] = value
    return build_task(f"hypospace-{domain}", **merge_task_settings(flags, getattr(args, "task_arg", [])))


def split_from_args(task: HypoSpaceTask, args: argparse.Namespace) -> list[Instance]:
    """The instances of `--split` under --seed / --test-fraction / --limit; ValueError when there are none."""
    instances = task.split(args.split, args.seed, args.test_fraction, args.limit)
    if not instances:
        raise ValueError(
            f"split {args.split!r} of {task.name} {task.params} is empty "
            f"(test_fraction={args.test_fraction}, limit={args.limit})"
        )
    return instances


def register(subparsers: Any) -> None:
    """Add `divrl hypospace generate ...`."""
    parser = subparsers.add_parser("hypospace", help="HypoSpace tasks: generate observation sets with H_O.")
    commands = parser.add_subparsers(dest="hypospace_command", metavar="ACTION")
    generate = commands.add_parser(
        "generate",
        help="write every observation set with its complete admissible set as JSONL",
        description="One JSON object per observation set: id, domain, params, observations, hypotheses.",
    )
    generate.add_argument("--domain", required=True, choices=["causal", "voxel", "boolean"])
    add_task_arguments(generate)
    generate.add_argument("--split", choices=["all", "train", "test"], default="all", help="which instances to write")
    generate.add_argument("--out", required=True, help="output JSONL file")
    generate.set_defaults(func=_generate)
    parser.set_defaults(func=lambda args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def stream_split(task: HypoSpaceTask, split: str, seed: int = 0, test_fraction: float = 0.5,
                 limit: int | None = None) -> Iterator[Instance]:
    """The instances `task.split(split, seed, test_fraction, limit)` returns, in the same order, built one at a
    time; a split other than "all", or a limit, costs one extra counting pass over the enumeration."""
    from divrl.tasks.hypospace.common import split_instances

    if split == "all" and limit is None:
        yield from task.iter_instances()
        return
    count = sum(1 for _ in task.enumerate())
    chosen = set(split_instances(range(count), split, seed, test_fraction, limit))  # the same indices as split()
    if not chosen:
        raise ValueError(f"split {split!r} of {task.name} {task.params} is empty "
                         f"(test_fraction={test_fraction}, limit={limit})")
    for index, instance in enumerate(task.iter_instances()):
        if index in chosen:
            yield instance


def _generate(args: argparse.Namespace) -> int:
    import json

    from divrl.tasks.hypospace.common import split_instances

    try:
        task = task_from_args(args.domain, args)
        out = output_file(args.out)
        split_instances([], args.split, args.seed, args.test_fraction, args.limit)  # bad split options: fail now
    except ValueError as exc:
        print(f"divrl hypospace generate: error: {exc}", file=sys.stderr)
        return 2
    partial = out.with_name(f".{out.name}.partial")
    count = hypotheses = 0
    try:
        with partial.open("w", encoding="utf-8") as handle:
            for instance in stream_split(task, args.split, args.seed, args.test_fraction, args.limit):
                handle.write(json.dumps(instance.to_json(), ensure_ascii=False) + "\n")
                count += 1
                hypotheses += len(instance.hypotheses)
        partial.replace(out)
    except ValueError as exc:
        print(f"divrl hypospace generate: error: {exc}", file=sys.stderr)
        return 2
    finally:
        partial.unlink(missing_ok=True)
    print(f"{task.name} {task.params}: wrote {count} observation sets ({hypotheses} admissible hypotheses) to {out}")
    return 0
