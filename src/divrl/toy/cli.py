"""`divrl toy`: train methods on a toy environment, print a results table, write metrics.json and plots.

Light at import time: torch, numpy and matplotlib load inside the handler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from divrl.toy.methods import LABELLED
from divrl.toy.options import DEPRECATED_FLAGS, ENV_DEFAULTS, ENV_OPTIONS, ENVS, TRAIN_OPTIONS, flag, method_flags


class _DeprecatedFlag(argparse.Action):
    """An old toy flag: stores its value under the new name and says which flag replaces it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"divrl toy: {option_string} is deprecated, use {flag(self.dest)} (DivRLConfig's name)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _add_method_flags(parser: argparse.ArgumentParser) -> None:
    """Give `parser` the registry's method flags and the deprecated ones when it first parses, so that the registry
    (and torch) load for `divrl toy` only, not for `divrl --help`."""
    parse = parser.parse_known_args

    def parse_known_args(args: Any = None, namespace: Any = None) -> tuple[argparse.Namespace, list[str]]:
        if parser.get_default("method_dests") is None:
            flags = method_flags()
            group = parser.add_argument_group("divrl methods (DivRLConfig's fields; unset: the toy's value, else "
                                              "the method's preset where its component is on, else the default)")
            for dest, (kind, text) in flags.items():
                group.add_argument(flag(dest), dest=dest, type=kind, default=None, help=text)
            for old_flag, dest in DEPRECATED_FLAGS.items():
                kind = flags[dest][0] if dest in flags else TRAIN_OPTIONS[dest][1]
                group.add_argument(old_flag, dest=dest, type=kind, action=_DeprecatedFlag, help=argparse.SUPPRESS)
            parser.set_defaults(method_dests=tuple(flags))
        return parse(args, namespace)

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]

def _float_list(text: str) -> list[float]:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _method_list(text: str) -> list[str]:
    """Parse and validate `--methods` (comma-separated; components joined by '+')."""
    from divrl.toy.methods import Method, components

    methods = [m.strip() for m in text.split(",") if m.strip()]
    if not methods:
        raise argparse.ArgumentTypeError(f"no method given; valid components: {', '.join(components())}")
    try:
        for method in methods:
            Method.parse(method)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if len(set(methods)) != len(methods):
        raise argparse.ArgumentTypeError(f"--methods lists a method twice: {text}")
    return methods


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `toy` subcommand."""
    parser = subparsers.add_parser(
        "toy",
        help="Train methods on a toy environment (bandit, multiplicity grid, hyper-grid, ideas).",
        description="Train GRPO variants on a toy environment of the execution-rewards and IPS papers; prints a "
                    "results table and "
        "writes OUT/metrics.json plus PNG plots. Methods: " + ", ".join(LABELLED)
        + " and any registered divrl method with a preset (its name, '_' as '-'), combined with '+' (e.g. pop+ips+qd).",
    )
    parser.add_argument("--env", required=True, choices=ENVS, help="toy environment")
    parser.add_argument("--methods", required=True, type=_method_list,
                        help="comma-separated methods, e.g. grpo,ips,pop+ips+qd")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds: 42, 142, 242, ... (default 3)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--ips-exact", action="store_true",
                        help="ips on tabular envs: divide by the exact outcome probability, not the group frequency")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    parser.add_argument("--quiet", action="store_true", help="no progress display")
    train = parser.add_argument_group("training (defaults depend on --env)")
    for dest, (option, kind, text) in TRAIN_OPTIONS.items():
        train.add_argument(option, dest=dest, type=kind, default=None, help=text)
    _add_method_flags(parser)
    env = parser.add_argument_group("environment")
    env.add_argument("--rewards", type=_float_list, help="bandit: arm rewards, e.g. 1,2,3,4 (default 1,2,3,4)")
    env.add_argument("--initial-logits", type=_float_list, help="bandit: initial policy logits (default 0s)")
    env.add_argument("--reward-noise", type=float, help="bandit: Gaussian reward noise std (default 0)")
    env.add_argument("--dim", type=int, help="hypergrid: dimensions D (default 2); ideas: idea dimension (16)")
    env.add_argument("--side", type=int, help="hypergrid: side H (default 8)")
    env.add_argument("--r0", type=float, help="hypergrid: R0 (default 0.1)")
    env.add_argument("--r1", type=float, help="hypergrid: R1 (default 0.5)")
    env.add_argument("--r2", type=float, help="hypergrid: R2 (default 2.0)")
    env.add_argument("--exec-lambda", type=float, help="ideas: lambda in P_exec (default 1.0)")
    env.add_argument("--noise", type=float, help="ideas: execution noise std (default 0.3)")
    env.add_argument("--landscape-seed", type=int, help="ideas: seed of the peak directions (default 0)")
    parser.set_defaults(func=handler)


def env_options(args: argparse.Namespace) -> dict[str, Any]:
    """The environment options given on the command line; ValueError if one does not apply to --env."""
    given = {dest: getattr(args, dest) for dest in ENV_OPTIONS if getattr(args, dest) is not None}
    wrong = [ENV_OPTIONS[d][0] for d in given if args.env not in ENV_OPTIONS[d][1]]
    if wrong:
        valid = [flag for flag, envs in ENV_OPTIONS.values() if args.env in envs]
        raise ValueError(f"option(s) {', '.join(wrong)} do not apply to --env {args.env}; "
                         f"its options are: {', '.join(valid) or 'none'}")
    return given


def build_env(name: str, options: dict[str, Any]) -> Any:
    """Construct the named environment from its command-line options."""
    from divrl.toy import envs

    if name == "bandit":
        return envs.make_bandit(options.get("rewards", [1.0, 2.0, 3.0, 4.0]), options.get("initial_logits"),
                                options.get("reward_noise", 0.0))
    if name == "multiplicity":
        return envs.make_multiplicity_grid()
    if name == "hypergrid":
        return envs.make_hypergrid(**options)
    return envs.IdeaEnv(**options)


def train_config(args: argparse.Namespace) -> Any:
    """TrainConfig from the environment defaults overridden by the given training options."""
    from divrl.toy.runner import TrainConfig

    if args.ips_outcome is not None and args.env != "ideas":
        raise ValueError(f"--ips-outcome applies to --env ideas only: {args.env}'s outcomes are already discrete")
    values = dict(ENV_DEFAULTS[args.env])
    given = (*TRAIN_OPTIONS, *args.method_dests)
    values.update({dest: getattr(args, dest) for dest in given if getattr(args, dest) is not None})
    values["ips_exact"] = args.ips_exact
    return TrainConfig(**values)


def check_methods(env: Any, methods: list[str], cfg: Any) -> None:
    """Check every method's settings on `env` before any trains (the methods' own checks; ValueError names the flag)."""
    from divrl.toy.methods import Method
    from divrl.toy.runner import toy_method_args

    for method in methods:
        toy_method_args(env, Method.parse(method), cfg)


def prepare_out(out: Path) -> None:
    """Create the --out directory before any training, or raise a ValueError saying why it cannot be used."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"--out {out}: cannot create the directory ({error.strerror or error})") from None
    if not os.access(out, os.W_OK):
        raise ValueError(f"--out {out} is not writable")


class Progress:
    """Progress on stderr: a rewritten line on a terminal, a line per 10 % otherwise."""

    def __init__(self, label: str, enabled: bool) -> None:
        self.label, self.enabled = label, enabled
        self.tty = sys.stderr.isatty()
        self.start = time.perf_counter()
        self.last_decile = -1

    def __call__(self, step: int, total: int) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        line = f"{self.label}: step {step}/{total} ({elapsed:.1f}s)"
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if step == total else ""))
            sys.stderr.flush()
        elif step * 10 // total > self.last_decile:
            self.last_decile = step * 10 // total
            print(line, file=sys.stderr, flush=True)


def handler(args: argparse.Namespace) -> int:
    """Run every method over all seeds, then print the table and write metrics.json and plots."""
    try:
        options = env_options(args)
        if args.seeds < 1:
            raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
        env = build_env(args.env, options)
        cfg = train_config(args)
        check_methods(env, args.methods, cfg)
        prepare_out(args.out)
    except ValueError as error:
        print(f"divrl toy: error: {error}", file=sys.stderr)
        return 2
    from divrl.toy.envs import TabularEnv
    from divrl.toy.plots import plot_all
    from divrl.toy.report import format_table, metrics_document
    from divrl.toy.runner import train

    seeds = [42 + 100 * i for i in range(args.seeds)]
    runs = []
    for i, method in enumerate(args.methods, start=1):
        progress = Progress(f"[{i}/{len(args.methods)}] {method} on {args.env} ({len(seeds)} seeds)", not args.quiet)
        try:
            runs.append(train(env, method, cfg, seeds, progress))
        except ValueError as error:
            print(f"divrl toy: error: {error}", file=sys.stderr)
            return 2
    tabular = isinstance(env, TabularEnv)
    config = {"methods": args.methods, "seeds": seeds, "env_options": options, **cfg.record()}
    doc = metrics_document(args.env, config, runs, env.target.tolist() if tabular else None)
    (args.out / "metrics.json").write_text(json.dumps(doc, indent=1))
    print(f"\n{args.env}: final metrics (mean ± std over {len(seeds)} seeds, last 10 steps)")
    print(format_table(doc))
    if tabular:
        target = ", ".join(f"{t:.3f}" for t in env.outcome_freqs(env.target).tolist())
        print(f"target outcome_freqs ({', '.join(env.freq_labels)}): [{target}]")
    written = [args.out / "metrics.json"]
    if not args.no_plots:
        written += plot_all(runs, env, args.out)
    print("wrote " + ", ".join(str(p) for p in written))
    return 0
