"""`divrl plot RUN_DIR...`: training curves of several runs on one figure (reward, diversity, entropy, ...)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

# Curves shown when logged, in this order; method metrics (prefixes below) follow.
STANDARD_KEYS = ("reward", "reward/max", "diversity/pairwise", "entropy", "completions/mean_length", "kl")
METHOD_PREFIXES = ("ips/", "qd/", "maxent/", "divergence/", "population/", "flowrl/")


def curve_keys(histories: list[list[dict]]) -> list[str]:
    """Standard keys and method metrics logged by at least one run, in display order."""
    logged = {key for history in histories for entry in history for key in entry}
    method = sorted(k for k in logged if k.startswith(METHOD_PREFIXES))
    return [k for k in STANDARD_KEYS if k in logged] + method


def plot_runs(run_dirs: list[str], out_path: Path) -> list[str]:
    """Plot every available curve of `run_dirs` into one PNG; returns the plotted metric keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from divrl.analysis.runs import load_log_history, metric_series

    histories = [load_log_history(run) for run in run_dirs]
    keys = curve_keys(histories)
    if not keys:
        raise ValueError(f"none of the runs logged any of {', '.join(STANDARD_KEYS)} or method metrics")
    cols = min(3, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.2 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for i, (run, history) in enumerate(zip(run_dirs, histories)):
            series = metric_series(history, key)
            if series:
                ax.plot([s[0] for s in series], [s[1] for s in series], color=f"C{i}", label=Path(run).name)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step")
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, dpi=110)
    plt.close(fig)
    return keys


def run_plot(args: argparse.Namespace) -> int:
    """Handler of `divrl plot`."""
    keys = plot_runs(args.runs, Path(args.out))
    print(f"plotted {len(keys)} metrics ({', '.join(keys)}) of {len(args.runs)} run(s) to {args.out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl plot`."""
    parser = subparsers.add_parser("plot", help="Plot training curves of one or more runs on one figure.")
    parser.add_argument("runs", nargs="+", help="training output directories (with trainer_state.json)")
    parser.add_argument("--out", default="curves.png", help="output PNG path (default: curves.png)")
    parser.set_defaults(func=run_plot)
