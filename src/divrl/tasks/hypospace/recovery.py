"""Recovery-rate evaluation: how much of each admissible set H_O a model's samples cover.

Two protocols. Parallel (the IPS paper's Figure 2): N independent samples per instance from one prompt.
Sequential (HypoSpace's own): N rounds, each prompt listing the instance's earlier readable proposals and
asking for a different one. N is fixed (`samples`) or per instance (`samples_per_instance`: HypoSpace's budget
N = ceil(m |H_O|), m = 2 in its reference).

Two recovery curves per instance. The prefix curve RR(n) reads the first n samples in the order drawn (the
HypoSpace protocol's curve; for the sequential protocol the order is the protocol itself). The order-free curve
(`curve_unbiased`) is its average over every ordering of the N samples: per admissible h with c_h of N samples
equal to h, P(h found within n) = 1 - C(N - c_h, n) / C(N, n) (`divrl.core.estimators`), RR(n) = mean over h.
Both agree at n = N. Per instance also: RR@|H_O| from the order-free curve (HypoSpace's headline budget; None
when N < |H_O|), validity, uniqueness and pass@k of validity (same estimator, c = valid samples). Per model:
macro-averages over instances with 95% percentile-bootstrap intervals (resampling instances); curves are
averaged up to the smallest N. The sampler is injected (`sampler(prompts, n) -> n completions per prompt`), so
tests feed chosen answers and `divrl eval recovery` feeds a real model.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from divrl.sampling import Prompt
from divrl.tasks.hypospace.common import HypoSpaceTask, Instance
from divrl.tasks.hypospace.metrics import score_proposals

PROTOCOLS = ("parallel", "sequential")
# Any `sampler(prompts, n) -> n completions per prompt`; `divrl.sampling` builds real ones.
Sampler = Callable[[Sequence[Prompt], int], list[list[str]]]
PromptBuilder = Callable[[Instance, Sequence[str]], Prompt]


def modal_share(proposals: Sequence[str | None]) -> float:
    """Share of an instance's samples taken by its most frequent readable answer (unreadable samples count in the
    denominator only): near 1 when the policy writes one answer for this observation."""
    readable = [p for p in proposals if p is not None]
    return max((readable.count(p) for p in set(readable)), default=0) / len(proposals)


def samples_per_instance(instances: Sequence[Instance], samples_per_hypothesis: float) -> list[int]:
    """HypoSpace's budget: N = ceil(m * |H_O|) samples for each instance (m = `samples_per_hypothesis` > 0)."""
    if not samples_per_hypothesis > 0:
        raise ValueError(f"samples per hypothesis must be > 0, got {samples_per_hypothesis}")
    # round() first so that e.g. 1.1 * 10 = 11.000000000000002 gives 11, not 12
    return [max(1, math.ceil(round(samples_per_hypothesis * len(i.hypotheses), 9))) for i in instances]


def _score(task: HypoSpaceTask, instance: Instance, completions: list[str], keep_text: bool) -> dict[str, Any]:
    proposals = [task.outcome_key(c) for c in completions]
    record = {"id": instance.id, **score_proposals(proposals, instance.admissible), "proposals": proposals}
    if keep_text:
        record["completions"] = completions
    return record


def _checked(produced: list[list[str]], prompts: int, n: int) -> list[list[str]]:
    if len(produced) != prompts or any(len(p) != n for p in produced):
        raise ValueError(f"the sampler must return {n} completions for each of {prompts} prompts")
    return produced


def _counts(instances: Sequence[Instance], samples: int | Sequence[int]) -> list[int]:
    counts = [samples] * len(instances) if isinstance(samples, int) else list(samples)
    if len(counts) != len(instances):
        raise ValueError(f"got {len(counts)} sample counts for {len(instances)} instances")
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"samples must be >= 1, got {samples}")
    return counts


def sample_instances(
    instances: Sequence[Instance],
    sampler: Sampler,
    samples: int | Sequence[int],
    protocol: str,
    build_prompt: PromptBuilder,
    parse: Callable[[str], str | None],
    instances_per_call: int = 8,
    progress: bool = True,
    done: Mapping[str, list[str]] | None = None,
    on_chunk: Callable[[Sequence[Instance], list[list[str]]], None] | None = None,
    seed: int | None = None,
) -> list[list[str]]:
    """`samples` completions per instance (one count for all, or one per instance) under `protocol`; sequential
    rounds list earlier readable proposals. Instances go in fixed chunks of `instances_per_call`; a chunk whose
    instances are all in `done` (id -> completions, e.g. from an interrupted run) is not sampled again, any other
    is sampled whole; `on_chunk(instances, completions)` sees each chunk as it finishes. With `seed`, a sampler
    that can `reseed` restarts its stream at every chunk from (seed, the chunk's first instance id), so a resumed
    evaluation draws exactly what an uninterrupted one would."""
    from tqdm.auto import tqdm

    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {PROTOCOLS}")
    done = done or {}
    all_counts = _counts(instances, samples)
    for instance, count in zip(instances, all_counts, strict=True):
        if instance.id in done and len(done[instance.id]) != count:
            raise ValueError(f"{len(done[instance.id])} completions recorded for {instance.id}, {count} wanted")
    chunks = [(instances[start : start + instances_per_call], all_counts[start : start + instances_per_call])
              for start in range(0, len(instances), instances_per_call)]
    pending = [(chunk, wanted) for chunk, wanted in chunks if any(i.id not in done for i in chunk)]
    sampled: dict[str, list[str]] = {}
    with tqdm(total=len(instances), initial=len(instances) - sum(len(chunk) for chunk, _ in pending),
              desc="instances", unit="inst", disable=None if progress else True) as bar:  # None: no bar in a log
        for chunk, wanted in pending:
            if seed is not None and hasattr(sampler, "reseed"):
                sampler.reseed(chunk_seed(seed, chunk[0].id))
            produced: list[list[str]] = [[] for _ in chunk]
            if protocol == "parallel":
                for n in dict.fromkeys(wanted):  # one call per distinct count, in order of appearance
                    group = [i for i, w in enumerate(wanted) if w == n]
                    answers = _checked(sampler([build_prompt(chunk[i], ()) for i in group], n), len(group), n)
                    for i, answer in zip(group, answers, strict=True):
                        produced[i] = answer
            else:
                earlier: list[list[str]] = [[] for _ in chunk]
                for round_ in range(max(wanted)):
                    group = [i for i, w in enumerate(wanted) if w > round_]
                    prompts = [build_prompt(chunk[i], earlier[i]) for i in group]
                    for i, (answer,) in zip(group, _checked(sampler(prompts, 1), len(group), 1), strict=True):
                        produced[i].append(answer)
                        key = parse(answer)
                        if key is not None:
                            earlier[i].append(key)
            sampled.update(zip((instance.id for instance in chunk), produced, strict=True))
            if on_chunk is not None:
                on_chunk(chunk, produced)
            bar.update(len(chunk))
    return [sampled[instance.id] if instance.id in sampled else done[instance.id] for instance in instances]


def chunk_seed(seed: int, instance_id: str) -> int:
    """The sampling seed of the chunk that starts with `instance_id`: fixed by the evaluation's seed and the id."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{instance_id}".encode()).digest()[:4], "little")


def bootstrap_mean(values: np.ndarray, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Mean over axis 0 with a 95% percentile-bootstrap interval (instances resampled with replacement)."""
    values = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    return {"mean": values.mean(axis=0).tolist(), "ci_low": low.tolist(), "ci_high": high.tolist()}


def summarize(per_instance: Sequence[dict[str, Any]], resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Macro-averages of `score_proposals` records with 95% bootstrap intervals (instances resampled).

    Curves (`curve`, `curve_unbiased`, `distinct_valid[_unbiased]` = RR(n) x |H_O|, `pass_at_k`) are averaged
    for n = 1..`curve_n` = the smallest N among the instances; `recovery` (RR@N) and `pass_at_n` (pass@N of
    validity: at least one valid sample) are taken at each instance's own N;
    `recovery_at_n_admissible` (order-free RR@|H_O|) and `uniform_ceiling_at_n_admissible` (what the validity
    allows) average the instances with N >= |H_O| (how many: their `instances` entry; None when there are none).
    """
    if not per_instance:
        raise ValueError("no instances to summarize")
    n_common = min(r["n_samples"] for r in per_instance)
    summary: dict[str, Any] = {
        metric: bootstrap_mean(np.array([r[metric] for r in per_instance]), resamples, seed)
        for metric in ("validity", "uniqueness", "recovery", "vendi_valid")
    }
    summary["pass_at_n"] = bootstrap_mean(np.array([r["pass_at_k"][-1] for r in per_instance]), resamples, seed)
    for metric in ("curve", "curve_unbiased", "pass_at_k"):
        summary[metric] = bootstrap_mean(np.array([r[metric][:n_common] for r in per_instance]), resamples, seed)
    for metric, curve in (("distinct_valid", "curve"), ("distinct_valid_unbiased", "curve_unbiased")):
        found = np.array([np.array(r[curve][:n_common]) * r["n_admissible"] for r in per_instance])
        summary[metric] = bootstrap_mean(found, resamples, seed)
    for metric in ("recovery_at_n_admissible", "uniform_ceiling_at_n_admissible"):
        at_size = [r[metric] for r in per_instance if r[metric] is not None]
        summary[metric] = (
            {**bootstrap_mean(np.array(at_size), resamples, seed), "instances": len(at_size)} if at_size else None
        )
    summary["curve_n"] = n_common
    return summary


def evaluate_recovery(
    task: HypoSpaceTask,
    instances: Sequence[Instance],
    sampler: Sampler,
    samples: int | Sequence[int],
    protocol: str = "parallel",
    build_prompt: PromptBuilder | None = None,
    instances_per_call: int = 8,
    resamples: int = 1000,
    seed: int = 0,
    keep_completions: bool = False,
    progress: bool = True,
    done: Mapping[str, list[str]] | None = None,
    on_chunk: Callable[[Sequence[Instance], list[list[str]]], None] | None = None,
    sample_seed: int | None = None,
) -> dict[str, Any]:
    """Per-instance curves and metrics (`score_proposals`) plus their macro-averages (`summarize`).

    `samples` is N for every instance, or one N per instance (e.g. `samples_per_instance`); `done` and
    `on_chunk` resume an interrupted evaluation, `sample_seed` seeds each chunk's draws (`sample_instances`).
    """
    if not instances:
        raise ValueError(f"no instances to evaluate for {task.name}")
    build_prompt = build_prompt or task.prompts_for("chat")
    completions = sample_instances(
        instances, sampler, samples, protocol, build_prompt, task.parse, instances_per_call, progress, done, on_chunk,
        sample_seed,
    )
    per_instance = [_score(task, i, c, keep_completions) for i, c in zip(instances, completions, strict=True)]
    return {**summarize(per_instance, resamples, seed), "n_instances": len(per_instance), "instances": per_instance}


def plot_recovery(models: Sequence[dict[str, Any]], path: str | Path, title: str) -> Path:
    """One colour per model: RR(n) and distinct admissible hypotheses found vs samples n, with 95% bands.

    Solid lines: the order-free estimate (`curve_unbiased`) when the results hold it; dotted: the prefix curve
    (first n samples in order), the only one drawn for results without the order-free curve.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    pairs = (("curve_unbiased", "curve"), ("distinct_valid_unbiased", "distinct_valid"))
    for index, model in enumerate(models):
        color = f"C{index % 10}"
        for ax, (unbiased, prefix) in zip(axes, pairs, strict=True):
            for metric, style in ((unbiased, "-"), (prefix, ":")):
                if metric not in model or model[metric] is None:
                    continue
                stats = model[metric]
                n = np.arange(1, len(stats["mean"]) + 1)
                has_both = unbiased in model
                label = model["label"] + (" (first n)" if has_both and metric == prefix else "")
                solid = metric == unbiased or not has_both
                ax.plot(n, stats["mean"], style if has_both else "-", color=color, label=label,
                        marker="o" if len(n) <= 20 and solid else None, ms=3)
                if solid:
                    ax.fill_between(n, stats["ci_low"], stats["ci_high"], color=color, alpha=0.2)
    axes[0].set(xlabel="samples n", ylabel="recovery rate RR(n)", ylim=(0, 1.02), title="Recovery rate")
    axes[1].set(xlabel="samples n", ylabel="distinct admissible hypotheses", title="Distinct valid outcomes")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if any("curve_unbiased" in m for m in models):
        fig.text(0.5, 0.01, "solid: order-free estimate (mean over all orderings of the N samples), with 95% band; "
                 "dotted: first n samples as drawn", ha="center", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
