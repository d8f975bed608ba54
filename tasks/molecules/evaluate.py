"""Evaluate a SMILES generator: sample, score with the task's cached reward, write metrics and a plot.

The sampler is injected (`Sampler`: a batch of prompts -> one completion per prompt), so the
evaluation runs the same on a real model (`divrl eval molecules`) and on chosen completions in tests.
Samples are scored in sampling order, so the oracle-call history is the one an RL run with the same
samples would have: Generative Yield and Oracle Burden are read from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from divrl.tasks.molecules.chem import extract_smiles
from divrl.tasks.molecules.data import build_rows, reference_smiles
from divrl.tasks.molecules.metrics import molecule_metrics, yield_curve
from divrl.tasks.molecules.task import MoleculeTask

Prompt = str | list[dict[str, str]]
Sampler = Callable[[list[Prompt]], list[Any]]


def evaluate_molecules(
    sampler: Sampler,
    samples: int,
    *,
    style: str = "base",
    prompts: int = 16,
    shots: int = 3,
    batch_size: int = 16,
    seed: int = 0,
    task: MoleculeTask | None = None,
    reference: Sequence[str] | None = None,
    taus: Sequence[float] = (0.8, 0.85),
    ob_n: int = 100,
    out_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Draw `samples` completions (round-robin over `prompts` seeded few-shot prompts), score them and
    return the metrics; with `out_dir`, also write metrics.json, samples.jsonl and plot.png there.

    `reference` defaults to every molecule in the shipped SMILES files (the few-shot pool included,
    so copying an example is not novel).
    """
    if samples < 1 or prompts < 1 or batch_size < 1:
        raise ValueError(f"need samples, prompts and batch_size >= 1, got {samples}, {prompts}, {batch_size}")
    task = task or MoleculeTask()
    rows = build_rows(prompts, style=style, n_shots=shots, seed=seed)
    order = [rows[i % prompts] for i in range(samples)]
    completions: list[Any] = []
    for start in range(0, samples, batch_size):
        batch = [row["prompt"] for row in order[start : start + batch_size]]
        produced = sampler(batch)
        if len(produced) != len(batch):
            raise ValueError(f"the sampler returned {len(produced)} completions for {len(batch)} prompts")
        completions.extend(produced)
    smiles = [extract_smiles(c) for c in completions]
    scores = task.scorer.score(smiles)
    reference = reference_smiles() if reference is None else list(reference)
    metrics = molecule_metrics(smiles, scores, task.scorer.history, reference, taus=taus, ob_n=ob_n)
    copied = sum(s is not None and s in row["few_shot"] for s, row in zip(smiles, order, strict=True))
    metrics["few_shot_copy_fraction"] = copied / samples
    metrics["config"] = {"style": style, "prompts": prompts, "shots": shots, "seed": seed, "mpo": list(task.mpo.names)}
    if out_dir is not None:
        _write_outputs(Path(out_dir), metrics, completions, smiles, scores, task.scorer.history, taus)
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
