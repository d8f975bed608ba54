"""Evaluate a SMILES generator: sample, score with the task's cached reward, write metrics and a plot.

The sampler is injected (`divrl.sampling.Sampler`: `sampler(prompts, n)` -> n completions per prompt),
so the evaluation runs the same on a real model (`divrl eval molecules`) and on chosen completions in
tests. Samples are scored round-robin over the prompts (1st sample of every prompt, then the 2nd, ...),
the order a batched RL run would see them; Generative Yield and Oracle Burden read the resulting
oracle-call history.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from divrl.core.estimators import mean_pass_at_k_curve
from divrl.sampling import Sampler
from divrl.tasks.molecules.chem import answer_smiles
from divrl.tasks.molecules.data import build_rows, reference_smiles
from divrl.tasks.molecules.metrics import check_budget, check_taus, molecule_metrics, yield_curve
from divrl.tasks.molecules.task import MoleculeTask


def prompt_rows(samples: int, *, style: str, prompts: int, shots: int, seed: int) -> list[dict[str, Any]]:
    """The seeded few-shot prompt rows an evaluation of `samples` completions uses (no more prompts than samples)."""
    return build_rows(min(prompts, samples), style=style, n_shots=shots, seed=seed)


def evaluate_molecules(
    sampler: Sampler,
    samples: int,
    *,
    style: str = "base",
    prompts: int = 16,
    shots: int = 3,
    seed: int = 0,
    task: MoleculeTask | None = None,
    reference: Sequence[str] | None = None,
    taus: Sequence[float] = (0.8, 0.85),
    ob_n: int = 100,
    budget: int | None = None,
    out_dir: str | Path | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Draw `samples` completions spread evenly over `prompts` seeded few-shot prompts, score them and
    return the metrics; with `out_dir`, also write metrics.json, samples.jsonl and plot.png there.

    `task` defaults to a fresh MoleculeTask (a given task's earlier oracle calls count towards Yield);
    `reference` defaults to every molecule in the shipped SMILES files (the few-shot pool included,
    so copying an example is not novel); `budget` adds Generative Yield within that many oracle calls;
    `metadata` (e.g. the model and sampling settings) is stored under metrics["config"].
    """
    if samples < 1 or prompts < 1:
        raise ValueError(f"need samples >= 1 and prompts >= 1, got samples={samples}, prompts={prompts}")
    check_taus(taus)
    check_budget(budget)
    task = task or MoleculeTask()
    rows = prompt_rows(samples, style=style, prompts=prompts, shots=shots, seed=seed)
    per_prompt, extra = divmod(samples, len(rows))  # the first `extra` prompts get one more sample
    outputs: list[list[Any]] = []
    for group, n in ((rows[:extra], per_prompt + 1), (rows[extra:], per_prompt)):
        if group and n:
            produced = sampler([row["prompt"] for row in group], n)
            if len(produced) != len(group) or any(len(p) != n for p in produced):
                raise ValueError(f"the sampler did not return {n} completions for each of {len(group)} prompts")
            outputs.extend(produced)
    order = [
        (row, out[j]) for j in range(per_prompt + 1) for row, out in zip(rows, outputs, strict=True) if j < len(out)
    ]
    completions = [completion for _, completion in order]
    smiles = [answer_smiles(completion, row["prompt"]) for row, completion in order]
    scores = task.scorer.score(smiles)
    rejected = [task.scorer.rejected[s] for s in smiles if s is not None and s in task.scorer.rejected]
    shipped_reference = reference is None
    reference = reference_smiles() if shipped_reference else list(reference)
    history = task.scorer.history
    metrics = molecule_metrics(
        smiles, scores, history, reference, taus, ob_n, reference_canonical=shipped_reference, budget=budget
    )
    copied = sum(s is not None and s in row["few_shot"] for s, (row, _) in zip(smiles, order, strict=True))
    metrics["few_shot_copy_fraction"] = copied / samples
    # pass@k of "valid and reward > tau" per prompt (the unbiased estimator of divrl.core.estimators; samples of
    # one prompt are its group), averaged over prompts, for k = 1..the fewest samples a prompt got.
    prompt_of = [i for j in range(per_prompt + 1) for i, out in enumerate(outputs) if j < len(out)]
    metrics["pass_at_k"] = {
        str(tau): mean_pass_at_k_curve([
            (len(out), sum(smiles[s] is not None and scores[s] > tau for s, p in enumerate(prompt_of) if p == i))
            for i, out in enumerate(outputs)
        ])
        for tau in taus
    }
    # Valid molecules the chemistry sanity gate rejected (scored 0; see divrl.tasks.molecules.sanity), by reason.
    metrics["sanity_rejected"] = len(rejected) / samples
    metrics["sanity_rejections"] = dict(Counter(reason.split(":", 1)[0] for reason in rejected))
    metrics["config"] = {
        "style": style,
        "prompts": len(rows),
        "shots": shots,
        "seed": seed,
        "objective": task.objective.config(),
        **(metadata or {}),
    }
    if out_dir is not None:
        _write_outputs(Path(out_dir), metrics, completions, smiles, scores, history, taus)
    return metrics


def _write_outputs(
    out: Path,
    metrics: dict[str, Any],
    completions: list[Any],
    smiles: list[str | None],
    scores: list[float],
    history: Sequence[tuple[str, float]],
    taus: Sequence[float],
) -> None:
    """metrics.json, samples.jsonl (completion, SMILES, score per sample) and plot.png under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
    with (out / "samples.jsonl").open("w") as handle:
        for completion, s, score in zip(completions, smiles, scores, strict=True):
            handle.write(json.dumps({"completion": completion, "smiles": s, "score": score}) + "\n")
    plot_evaluation(out / "plot.png", scores, smiles, history, taus)


def plot_evaluation(
    path: Path,
    scores: Sequence[float],
    smiles: Sequence[str | None],
    history: Sequence[tuple[str, float]],
    taus: Sequence[float],
) -> None:
    """Two panels: the reward distribution of valid samples, and Generative Yield over oracle calls."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    valid = [score for score, s in zip(scores, smiles, strict=True) if s is not None]
    left.hist(valid, bins=20, range=(0.0, 1.0), color="tab:blue", edgecolor="white")
    left.set(
        xlabel="reward (MPO)",
        ylabel="valid samples",
        title=f"{len(valid)} valid of {len(scores)} samples",
    )
    calls = range(1, len(history) + 1)
    for tau in taus:
        right.plot(calls, yield_curve(history, tau), label=f"tau = {tau}")
    right.set(xlabel="oracle calls", ylabel="unique molecules with reward > tau", title="Generative Yield")
    if history:
        right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
