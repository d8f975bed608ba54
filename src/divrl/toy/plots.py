"""PNG figures of toy runs: curves with seed bands, learned vs target distributions, complexity histograms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from divrl.toy.envs import IdeaEnv, TabularEnv
from divrl.toy.report import seed_std
from divrl.toy.runner import MethodRun


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (imported lazily: it is slow)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(plt: Any, count: int, width: float = 4.0, height: float = 3.0) -> tuple[Any, list[Any]]:
    """A figure with `count` panels on a grid of up to 3 columns (unused cells hidden)."""
    cols = min(count, 3)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:count])


def plot_curves(runs: list[MethodRun], path: Path) -> Path:
    """One panel per scalar metric: each method's mean over seeds with a +-1 sample-std band (the execution-rewards
    paper Fig. 1)."""
    plt = _pyplot()
    names = [n for n, v in runs[0].curves.items() if v.ndim == 2]
    fig, axes = _grid(plt, len(names))
    for ax, name in zip(axes, names):
        for run in runs:
            values = run.curves[name]
            mean, std = values.mean(0), seed_std(values)
            steps = np.arange(1, len(mean) + 1)
            (line,) = ax.plot(steps, mean, label=run.method, lw=1.2)
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_title(name)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"mean over {len(runs[0].seeds)} seeds, band = ±1 sample std (ddof 1, as in metrics.json)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_outcome_freqs(runs: list[MethodRun], env: TabularEnv, path: Path) -> Path:
    """One panel per method: frequency of each reported outcome group over training, target dashed."""
    plt = _pyplot()
    target = env.outcome_freqs(env.target).tolist()
    fig, axes = _grid(plt, len(runs))
    for ax, run in zip(axes, runs):
        freqs = run.curves["outcome_freqs"].mean(0)  # (steps, groups)
        for j, label in enumerate(env.freq_labels):
            (line,) = ax.plot(np.arange(1, freqs.shape[0] + 1), freqs[:, j], label=label, lw=1.2)
            ax.axhline(target[j], color=line.get_color(), ls="--", lw=0.8)
        ax.set_title(run.method)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle("outcome frequencies (dashed: reward-proportional target)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_distribution(runs: list[MethodRun], env: TabularEnv, path: Path) -> Path:
    """Final learned outcome distribution of each method next to the target (heatmaps for a 2-D hyper-grid)."""
    plt = _pyplot()
    target = env.target.numpy()
    side_2d = round(len(target) ** 0.5) if env.name == "hypergrid" and env.descriptors.shape[1] == 2 else 0
    if side_2d:
        fig, axes = _grid(plt, len(runs) + 1, width=3.2, height=3.0)
        panels = [("target", target)] + [(r.method, r.final_distribution.mean(0)) for r in runs]
        vmax = max(p.max() for _, p in panels)
        for ax, (title, dist) in zip(axes, panels):
            image = ax.imshow(dist.reshape(side_2d, side_2d).T, origin="lower", vmin=0, vmax=vmax, cmap="viridis")
            ax.set_title(title)
        fig.colorbar(image, ax=axes, shrink=0.8)
    else:
        grouped = env.name == "hypergrid"  # many cells: compare at the mode level
        labels = env.freq_labels if grouped else env.outcome_labels
        ref = env.outcome_freqs(env.target).numpy() if grouped else target
        fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(labels) * (len(runs) + 1)), 3.5))
        width = 0.8 / (len(runs) + 1)
        x = np.arange(len(labels))
        ax.bar(x, ref, width, label="target", color="black", alpha=0.7)
        for i, run in enumerate(runs, start=1):
            dist = run.final_distribution.mean(0)
            values = env.outcome_freqs(torch.from_numpy(dist)).numpy() if grouped else dist
            ax.bar(x + i * width, values, width, label=run.method)
        ax.set_xticks(x + 0.4 - width / 2, labels, rotation=30 if len(labels) > 6 else 0, fontsize=8)
        ax.set_ylabel("probability")
        ax.legend(fontsize=8)
        fig.suptitle("final outcome distribution (last 10 steps, mean over seeds) vs target")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_complexity(runs: list[MethodRun], path: Path) -> Path:
    """Complexity ||x|| early (first 10 epochs) vs late (last 10 epochs) per method (the execution-rewards paper Fig.
    3)."""
    plt = _pyplot()
    fig, axes = _grid(plt, len(runs), width=3.6, height=2.8)
    for ax, run in zip(axes, runs):
        assert run.complexity_early is not None and run.complexity_late is not None
        high = float(np.percentile(np.concatenate([run.complexity_early, run.complexity_late]), 99.5))
        bins = np.linspace(0, high, 40)
        ax.hist(run.complexity_early, bins=bins, alpha=0.6, color="tab:blue", label="early", density=True)
        ax.hist(run.complexity_late, bins=bins, alpha=0.6, color="tab:red", label="late", density=True)
        ax.set_title(run.method)
        ax.set_xlabel("complexity ||x||")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_overview(panels: list[tuple[str, TabularEnv, list[MethodRun]]], path: Path) -> Path:
    """One row per environment: the likeliest outcome's probability over training (mean, +-1 seed std band), and
    each method's final outcome-group distribution (mean over seeds, seed-std whiskers) beside the target."""
    plt = _pyplot()
    fig, axes = plt.subplots(len(panels), 2, figsize=(10, 3.2 * len(panels)), squeeze=False)
    for (name, env, runs), (curve_ax, bar_ax) in zip(panels, axes):
        width = 0.8 / (len(runs) + 1)
        x = np.arange(len(env.freq_labels))
        bar_ax.bar(x, env.outcome_freqs(env.target).numpy(), width, label="target (∝ reward)", color="black",
                   alpha=0.7)
        for i, run in enumerate(runs, start=1):
            values = run.curves["max_outcome_prob"]
            mean, std = values.mean(0), seed_std(values)
            steps = np.arange(1, len(mean) + 1)
            (line,) = curve_ax.plot(steps, mean, label=run.method, lw=1.4)
            curve_ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2, lw=0)
            groups = np.stack([env.outcome_freqs(torch.from_numpy(d)).numpy() for d in run.final_distribution])
            bar_ax.bar(x + i * width, groups.mean(0), width, yerr=seed_std(groups), color=line.get_color(),
                       label=run.method, capsize=2)
        curve_ax.set(title=f"{name}: probability of the likeliest outcome", xlabel="training step", ylim=(0, 1.02))
        bar_ax.set_xticks(x + 0.4 - width / 2, env.freq_labels, fontsize=8)
        bar_ax.set(title=f"{name}: final outcome distribution", ylabel="probability", ylim=(0, 1.02))
        curve_ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    axes[0][1].legend(fontsize=8)
    fig.suptitle(f"mean over {len(panels[0][2][0].seeds)} seeds (band, whiskers: ±1 seed std); target: "
                 "probability ∝ reward")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(runs: list[MethodRun], env: TabularEnv | IdeaEnv, out_dir: Path) -> list[Path]:
    """Every figure that applies to `env`; returns the written paths."""
    paths = [plot_curves(runs, out_dir / "curves.png")]
    if isinstance(env, TabularEnv):
        paths.append(plot_outcome_freqs(runs, env, out_dir / "outcome_freqs.png"))
        paths.append(plot_distribution(runs, env, out_dir / "distribution.png"))
    else:
        paths.append(plot_complexity(runs, out_dir / "complexity_hist.png"))
    return paths
