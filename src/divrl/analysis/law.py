"""Quality-diversity law (the quality-diversity paper): fit R = -a exp(c D) + b and R = -a0 exp(c0 H) + b0 over a run's
logs.

For fixed c the model is linear in (a, b), so (a, b) come in closed form by least squares and only c is
searched (a grid over c * range(x), then golden-section refinement). Intervals for c are bootstrap
percentiles over resampled points. `divrl fit-law RUN_DIR...` fits each run and plots the curves.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

# A three-parameter curve needs more points than parameters to say anything.
MIN_POINTS = 4
# c is searched over c * (max(x) - min(x)) in [-C_SPAN, C_SPAN]: wide enough for any visible curvature.
C_SPAN = 30.0


@dataclass(frozen=True)
class LawFit:
    """Fitted y = -a exp(c x) + b with R^2 and a bootstrap interval for c."""

    a: float
    b: float
    c: float
    r2: float
    c_low: float
    c_high: float
    num_points: int


def _linear_fit(x: np.ndarray, y: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closed-form least-squares (a, b) and residual sum of squares for each c in the 1-D array `c`.

    The feature is exp(c (x - min x)) so that it stays within exp(C_SPAN) (no overflow when x sits far from
    0); `a` is scaled back to the model's exp(c x).
    """
    shift = float(x.min())
    feature = -np.exp(np.outer(c, x - shift))  # (len(c), n)
    centred = feature - feature.mean(axis=1, keepdims=True)
    y_centred = y - y.mean()
    variance = (centred**2).sum(axis=1)
    covariance = centred @ y_centred
    safe = np.where(variance > 0, variance, 1.0)
    a = np.where(variance > 0, covariance / safe, 0.0)  # c = 0: the feature is constant, only b fits
    b = y.mean() - a * feature.mean(axis=1)
    sse = (y_centred**2).sum() - np.where(variance > 0, covariance**2 / safe, 0.0)
    with np.errstate(over="ignore", under="ignore"):  # the true a may not be representable; inf / 0 say so
        return a * np.exp(-c * shift), b, sse


def _best_c(x: np.ndarray, y: np.ndarray) -> float:
    span = float(x.max() - x.min()) or 1.0
    grid = np.linspace(-C_SPAN, C_SPAN, 241) / span
    i = int(np.argmin(_linear_fit(x, y, grid)[2]))
    low, high = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(40):  # golden-section search inside the bracketing grid cells
        left, right = high - golden * (high - low), low + golden * (high - low)
        sse_left, sse_right = _linear_fit(x, y, np.array([left, right]))[2]
        if sse_left < sse_right:
            high = right
        else:
            low = left
    return float((low + high) / 2)


def fit_exponential_law(
    x: np.ndarray, y: np.ndarray, bootstrap: int = 1000, seed: int = 0, confidence: float = 0.95
) -> LawFit:
    """Fit y = -a exp(c x) + b; bootstrap the points `bootstrap` times for an interval on c."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-D of equal length, got {x.shape} and {y.shape}")
    if len(x) < MIN_POINTS:
        raise ValueError(f"need at least {MIN_POINTS} points to fit the law, got {len(x)}")
    c = _best_c(x, y)
    a, b, sse = (float(v[0]) for v in _linear_fit(x, y, np.array([c])))
    total = float(((y - y.mean()) ** 2).sum())
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(bootstrap):
        idx = rng.integers(0, len(x), len(x))
        if np.ptp(x[idx]) > 0:
            samples.append(_best_c(x[idx], y[idx]))
    tail = (1 - confidence) / 2 * 100
    c_low, c_high = (np.percentile(samples, [tail, 100 - tail]) if samples else (math.nan, math.nan))
    return LawFit(a=a, b=b, c=c, r2=1 - sse / total if total > 0 else math.nan,
                  c_low=float(c_low), c_high=float(c_high), num_points=len(x))


def fit_run(run_dir: str | Path, reward_key: str, diversity_key: str, entropy_key: str,
            bootstrap: int = 1000) -> dict[str, object]:
    """Fit both laws on one run's logged points; a law with too few points is reported, with a warning."""
    from divrl.analysis.runs import load_log_history, metric_series

    history = load_log_history(run_dir)
    result: dict[str, object] = {"run": str(run_dir)}
    for law, key in (("diversity", diversity_key), ("entropy", entropy_key)):
        rows = metric_series(history, reward_key, key)
        points = {"x": [r[2] for r in rows], "reward": [r[1] for r in rows]}
        if len(rows) < MIN_POINTS:
            warnings.warn(
                f"{run_dir}: only {len(rows)} logged points with both {reward_key!r} and {key!r}; "
                f"the {law} law needs at least {MIN_POINTS} (log more often with --logging_steps)",
                stacklevel=2,
            )
            result[law] = {"key": key, "fit": None, **points}
            continue
        fit = fit_exponential_law(np.array(points["x"]), np.array(points["reward"]), bootstrap=bootstrap)
        result[law] = {"key": key, "fit": asdict(fit), **points}
    return result


def _plot(results: list[dict[str, object]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, law, symbol in zip(axes, ("diversity", "entropy"), ("D", "H")):
        for i, result in enumerate(results):
            data = result[law]
            color = f"C{i}"
            label = Path(str(result["run"])).name
            ax.scatter(data["x"], data["reward"], s=14, color=color, alpha=0.7, label=label)
            if data["fit"]:
                fit = data["fit"]
                xs = np.linspace(min(data["x"]), max(data["x"]), 200)
                ax.plot(xs, -fit["a"] * np.exp(fit["c"] * xs) + fit["b"], color=color,
                        label=f"c={fit['c']:.3g} [{fit['c_low']:.3g}, {fit['c_high']:.3g}]")
        ax.set_xlabel(f"{symbol}: {results[0][law]['key']}")
        ax.set_ylabel("mean reward R")
        ax.set_title(f"R = -a exp(c {symbol}) + b")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_fit_law(args: argparse.Namespace) -> int:
    """Handler of `divrl fit-law`."""
    results = [fit_run(run, args.reward_key, args.diversity_key, args.entropy_key, args.bootstrap) for run in args.runs]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "law_fit.json").write_text(json.dumps(results, indent=2))
    _plot(results, out / "law_fit.png")
    print(f"{'run':<30} {'law':<10} {'c':>10} {'95% interval':>24} {'R^2':>7} {'points':>6}")
    for result in results:
        for law in ("diversity", "entropy"):
            fit = result[law]["fit"]
            name = Path(str(result["run"])).name[:30]
            if fit is None:
                print(f"{name:<30} {law:<10} {'too few points':>10}")
            else:
                interval = f"[{fit['c_low']:.4g}, {fit['c_high']:.4g}]"
                print(f"{name:<30} {law:<10} {fit['c']:>10.4g} {interval:>24} {fit['r2']:>7.3f} {fit['num_points']:>6}")
    print(f"wrote {out / 'law_fit.json'} and {out / 'law_fit.png'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl fit-law`."""
    parser = subparsers.add_parser("fit-law", help="Fit the quality-diversity and quality-entropy laws (the "
                                                   "quality-diversity paper).")
    parser.add_argument("runs", nargs="+", help="training output directories (with trainer_state.json)")
    parser.add_argument("--reward-key", default="divrl/task_reward",
                        help="logged mean-reward key (default: divrl/task_reward, the task reward before a method's "
                             "shaping, which DivRLTrainer logs for every method; TRL's `reward` is IPS's scaled one; "
                             "use --reward-key reward for a run of plain GRPOTrainer)")
    parser.add_argument("--diversity-key", default="diversity/pairwise",
                        help="logged diversity key (default: diversity/pairwise)")
    parser.add_argument("--entropy-key", default="entropy", help="logged entropy key (default: entropy)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the c intervals")
    parser.add_argument("--out", default="law_fit", help="output directory for law_fit.json / law_fit.png")
    parser.set_defaults(func=run_fit_law)
