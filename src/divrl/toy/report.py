"""metrics.json documents and the printed results table of toy runs."""

from __future__ import annotations

from typing import Any

import numpy as np

from divrl.toy.runner import FINAL_WINDOW, MethodRun

METRIC_HELP = {
    "l1_to_target": "L1 distance of the policy's exact outcome distribution to the target p*(o) ∝ r(o) (0 = match)",
    "kl_to_target": "KL(p* || policy): large when the policy misses outcomes the target covers",
    "max_outcome_prob": "probability of the policy's likeliest outcome (1 = collapsed onto one outcome)",
    "distinct_outcomes": "distinct outcomes among the step's samples (all population members for pop)",
    "outcome_freqs": "policy probability of each reported outcome group, compare with the target below",
    "pass_at_k": "P(at least one of k samples reaches the best reward) = 1 - (1 - p_best)^k, k = --passk",
    "mean_reward": "mean execution reward of the step's ideas",
    "max_reward": "best reward of the step (the discovery metric)",
    "diversity": "mean pairwise cosine distance of the step's ideas",
    "complexity": "mean ||x|| of the step's ideas (stands in for thinking length)",
    "outcomes_per_group": "distinct IPS outcomes (--ips-outcome) among a group's G ideas, mean over groups",
    "token_entropy": "policy entropy per token (ideas: per coordinate) of the step's batch, what maxent targets",
    "entropy_alpha": "maxent's adaptive entropy coefficient after the step's dual update (0 without maxent)",
}


def seed_std(per_seed: np.ndarray) -> np.ndarray:
    """Sample std (ddof = 1) over the leading seed axis; 0 for a single seed."""
    if per_seed.shape[0] < 2:
        return np.zeros(per_seed.shape[1:])
    return per_seed.std(axis=0, ddof=1)


def _mean_std(per_seed: np.ndarray) -> dict[str, Any]:
    """Mean and sample std (`seed_std`) over the seed axis; lists for vector metrics."""
    return {"mean": per_seed.mean(axis=0).tolist(), "std": seed_std(per_seed).tolist()}


def summarise(run: MethodRun) -> dict[str, Any]:
    """{"settings": the fields of the divrl methods it ran, "final": {METRIC: {"mean", "std"}}, "curves": {METRIC:
    per-step means}} of one method.

    "final" is each seed's mean over the last FINAL_WINDOW steps, then mean and std over seeds.
    """
    final, curves = {}, {}
    for name, values in run.curves.items():  # values: (seeds, steps) or (seeds, steps, k)
        window = values[:, -min(FINAL_WINDOW, values.shape[1]) :]
        final[name] = _mean_std(window.mean(axis=1))
        curves[name] = values.mean(axis=0).tolist()
    return {"settings": run.settings, "final": final, "curves": curves}


def metrics_document(
    env_name: str, config: dict[str, Any], runs: list[MethodRun], target: list[float] | None
) -> dict[str, Any]:
    """The metrics.json document: env, config, target (where one exists) and every method's summary."""
    doc: dict[str, Any] = {"env": env_name, "config": config}
    if target is not None:
        doc["target"] = target
    doc["methods"] = {run.method: summarise(run) for run in runs}
    return doc


def _cell(stat: dict[str, Any]) -> str:
    mean, std = stat["mean"], stat["std"]
    if isinstance(mean, list):
        return "[" + ", ".join(f"{m:.3f}" for m in mean) + "]"
    return f"{mean:.4f} ± {std:.4f}"


def format_table(doc: dict[str, Any]) -> str:
    """Plain-text table: one row per method, final mean ± std per metric (vector metrics as mean lists)."""
    methods = doc["methods"]
    metrics = list(next(iter(methods.values()))["final"])
    rows = [["method", *metrics]] + [[name, *(_cell(m["final"][k]) for k in metrics)] for name, m in methods.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"  {name}: {METRIC_HELP[name]}" for name in metrics]
    return "\n".join(lines)
