"""Recovery-rate evaluation: how much of each admissible set H_O a model's samples cover.

Two protocols. Parallel (the IPS paper's Figure 2): N independent samples per instance from one prompt,
RR(n) for n = 1..N from the first n samples. Sequential (HypoSpace's own): N rounds, each prompt listing
the instance's earlier readable proposals and asking for a different one. Per instance: the RR(n)
curve, validity and uniqueness; per model: macro-averages over instances with 95% percentile-bootstrap
intervals (resampling instances). The sampler is injected (`sampler(prompts, n) -> n completions per
prompt`), so tests feed chosen answers and `divrl eval recovery` feeds a real model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from divrl.sampling import Prompt
from divrl.tasks.hypospace.common import HypoSpaceTask, Instance, recovery_curve, uniqueness, validity

PROTOCOLS = ("parallel", "sequential")
# Any `sampler(prompts, n) -> n completions per prompt`; `divrl.sampling` builds real ones.
Sampler = Callable[[Sequence[Prompt], int], list[list[str]]]
PromptBuilder = Callable[[Instance, Sequence[str]], Prompt]


def _score(task: HypoSpaceTask, instance: Instance, completions: list[str], keep_text: bool) -> dict[str, Any]:
    proposals = [task.outcome_key(c) for c in completions]
    curve = recovery_curve(proposals, instance.admissible)
    record = {
        "id": instance.id,
        "n_admissible": len(instance.hypotheses),
        "validity": validity(proposals, instance.admissible),
        "uniqueness": uniqueness(proposals),
        "recovery": curve[-1],
        "curve": curve,
        "proposals": proposals,
    }
    if keep_text:
        record["completions"] = completions
    return record


def _checked(produced: list[list[str]], prompts: int, n: int) -> list[list[str]]:
    if len(produced) != prompts or any(len(p) != n for p in produced):
        raise ValueError(f"the sampler must return {n} completions for each of {prompts} prompts")
    return produced


def sample_instances(
    instances: Sequence[Instance],
    sampler: Sampler,
    samples: int,
    protocol: str,
    build_prompt: PromptBuilder,
    parse: Callable[[str], str | None],
    instances_per_call: int = 8,
    progress: bool = True,
) -> list[list[str]]:
    """`samples` completions per instance under `protocol`; sequential rounds list earlier readable proposals."""
    from tqdm.auto import tqdm

    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    completions: list[list[str]] = []
    with tqdm(total=len(instances), desc="instances", unit="inst", disable=not progress) as bar:
        for start in range(0, len(instances), instances_per_call):
            chunk = instances[start : start + instances_per_call]
            if protocol == "parallel":
                produced = _checked(sampler([build_prompt(inst, ()) for inst in chunk], samples), len(chunk), samples)
            else:
                produced = [[] for _ in chunk]
                earlier: list[list[str]] = [[] for _ in chunk]
                for _ in range(samples):
                    prompts = [build_prompt(inst, earlier[i]) for i, inst in enumerate(chunk)]
                    for i, (answer,) in enumerate(_checked(sampler(prompts, 1), len(chunk), 1)):
                        produced[i].append(answer)
                        key = parse(answer)
                        if key is not None:
                            earlier[i].append(key)
            completions.extend(produced)
            bar.update(len(chunk))
    return completions


def bootstrap_mean(values: np.ndarray, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Mean over axis 0 with a 95% percentile-bootstrap interval (instances resampled with replacement)."""
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return {"mean": values.mean(axis=0).tolist(), "ci_low": low.tolist(), "ci_high": high.tolist()}


def evaluate_recovery(
    task: HypoSpaceTask,
    instances: Sequence[Instance],
    sampler: Sampler,
    samples: int,
    protocol: str = "parallel",
    build_prompt: PromptBuilder | None = None,
    instances_per_call: int = 8,
    resamples: int = 1000,
    seed: int = 0,
    keep_completions: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Per-instance curves and metrics plus their macro-averages with bootstrap intervals."""
    if not instances:
        raise ValueError(f"no instances to evaluate for {task.name}")
    build_prompt = build_prompt or task.prompts_for("chat")
    completions = sample_instances(
        instances, sampler, samples, protocol, build_prompt, task.parse, instances_per_call, progress
    )
    per_instance = [_score(task, i, c, keep_completions) for i, c in zip(instances, completions, strict=True)]
    summary = {
        metric: bootstrap_mean(np.array([r[metric] for r in per_instance]), resamples, seed)
        for metric in ("validity", "uniqueness", "recovery", "curve")
    }
    distinct_found = np.array([np.array(r["curve"]) * r["n_admissible"] for r in per_instance])
    summary["distinct_valid"] = bootstrap_mean(distinct_found, resamples, seed)
    return {**summary, "n_instances": len(per_instance), "instances": per_instance}


def plot_recovery(models: Sequence[dict[str, Any]], path: str | Path, title: str) -> Path:
    """One curve per model: RR(n) and distinct admissible hypotheses found vs samples n, with 95% bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for model in models:
        for ax, metric in zip(axes, ("curve", "distinct_valid"), strict=True):
            stats = model[metric]
            n = np.arange(1, len(stats["mean"]) + 1)
            ax.plot(n, stats["mean"], marker="o" if len(n) <= 20 else None, ms=3, label=model["label"])
            ax.fill_between(n, stats["ci_low"], stats["ci_high"], alpha=0.2)
    axes[0].set(xlabel="samples n", ylabel="recovery rate RR(n)", ylim=(0, 1.02), title="Recovery rate")
    axes[1].set(xlabel="samples n", ylabel="distinct admissible hypotheses", title="Distinct valid outcomes")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
