"""Quality of the chemical LM prior (`embedded:smiles-clm`): MOSES's metrics on samples at temperature 1.

Samples `--samples` SMILES (default 10,000) from BOS alone with no top-k/top-p cut, then reports MOSES's metrics
(Polykovskiy et al., 2020): validity, unique@k (distinct among the valid), novelty against MOSES train (among the
unique valid, canonical SMILES against the training SMILES as written, as MOSES computes it), IntDiv and IntDiv2,
Frag and Scaf similarity to MOSES test (cosine of BRICS-fragment and Murcko-scaffold count profiles), and FCD to
test when the `fcd` package is installed (ChemNet weights ship inside it; against a seeded 10,000 of the test set,
not all of it as MOSES does, since ChemNet on this CPU reads about 60 molecules a second). Also the score
distribution of divrl's cheap MPO over the valid samples, and of each PMO oracle over the first 2,000 distinct valid
samples. The test set's reference profiles (fragments, scaffolds, ChemNet statistics) are computed once and cached
under $DIVRL_CACHE/data/moses/. Writes benchmarks/results/clm_prior.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from machine import cpu_model

RESULTS = Path(__file__).parent / "results"
# MOSES's CharRNN (Polykovskiy et al. 2020, Table 2): the anchor the issue names.
CHARRNN = {"validity": 0.975, "unique_at_10k": 0.999, "novelty": 0.842}
TARGET = {"validity": 0.95, "unique_at_10k": 0.99}
PERCENTILES = (50, 90, 99, 99.9)
FCD_REFERENCE = 10_000  # test molecules in FCD's reference statistics (MOSES uses all 176,074)


def _cached_canonical(split: str) -> list[str]:
    """Canonical SMILES of a MOSES split (invalid rows dropped), computed once and cached beside the split."""
    from divrl.tasks.molecules.chem import canonicalize
    from divrl.tasks.molecules.moses import moses_dir, moses_split, read_smiles_file

    cached = moses_dir() / f"{split}.canonical.txt.gz"
    if cached.is_file():
        with gzip.open(cached, "rt") as handle:
            return handle.read().split("\n")
    started = time.monotonic()
    canonical = [c for c in map(canonicalize, read_smiles_file(moses_split(split))) if c is not None]
    partial = cached.with_suffix(".partial")
    with gzip.open(partial, "wt") as handle:
        handle.write("\n".join(canonical))
    partial.replace(cached)
    print(f"canonicalised MOSES {split} ({len(canonical):,}) in {time.monotonic() - started:.0f} s", flush=True)
    return canonical


def _cached_profile(split: str, kind: str) -> Counter[str]:
    """MOSES's fragment or scaffold count profile of a split, cached as JSON."""
    from divrl.tasks.molecules.metrics import fragment_counts, scaffold_counts
    from divrl.tasks.molecules.moses import moses_dir

    cached = moses_dir() / f"{split}.{kind}.json.gz"
    if cached.is_file():
        with gzip.open(cached, "rt") as handle:
            return Counter(json.load(handle))
    counts = (fragment_counts if kind == "fragments" else scaffold_counts)(_cached_canonical(split))
    with gzip.open(cached, "wt") as handle:
        json.dump(counts, handle)
    return counts


def moses_metrics(samples: list[str], with_fcd: bool = True) -> dict[str, Any]:
    """MOSES's metrics of `samples` against MOSES train (novelty) and test (Frag, Scaf, FCD)."""
    from divrl.tasks.molecules.chem import canonicalize
    from divrl.tasks.molecules.metrics import count_cosine, fragment_counts, intdiv_moses, scaffold_counts
    from divrl.tasks.molecules.moses import moses_split, read_smiles_file

    canonical = [canonicalize(s) if s else None for s in samples]
    valid = [c for c in canonical if c is not None]
    unique = set(valid)
    # MOSES's novelty: canonical generated SMILES against the training SMILES as written (RDKit-canonical already)
    train = set(read_smiles_file(moses_split("train")))
    metrics: dict[str, Any] = {
        "samples": len(samples),
        "validity": len(valid) / len(samples),
        f"unique_at_{len(samples) // 1000}k": len(unique) / max(1, len(valid)),
        "novelty": sum(c not in train for c in unique) / max(1, len(unique)),
        "intdiv": intdiv_moses(valid, p=1),
        "intdiv2": intdiv_moses(valid, p=2),
        "frag_test": count_cosine(fragment_counts(valid), _cached_profile("test", "fragments")),
        "scaf_test": count_cosine(scaffold_counts(valid), _cached_profile("test", "scaffolds")),
    }
    if with_fcd:
        metrics["fcd_test"] = _fcd(valid)
    return metrics


def _fcd(valid: list[str]) -> float | None:
    """Fréchet ChemNet Distance of the valid samples to a seeded sample of `FCD_REFERENCE` MOSES test molecules (the
    `fcd` package; None without it)."""
    try:
        import numpy as np
        from fcd import get_predictions, load_ref_model
        from fcd.utils import calculate_frechet_distance
    except ImportError:
        return None
    from divrl.tasks.molecules.moses import moses_dir

    model = load_ref_model()
    cached = moses_dir() / f"test.chemnet.{FCD_REFERENCE}.npz"
    if not cached.is_file():  # ChemNet on the CPU reads ~60 molecules a second: a seeded sample of MOSES test
        reference = random.Random(0).sample(_cached_canonical("test"), FCD_REFERENCE)
        activations = get_predictions(model, reference)
        np.savez(cached, mu=activations.mean(0), sigma=np.cov(activations.T))
    reference = np.load(cached)
    activations = get_predictions(model, valid)
    return float(calculate_frechet_distance(activations.mean(0), np.cov(activations.T), reference["mu"],
                                            reference["sigma"]))


def mpo_distribution(samples: list[str]) -> dict[str, Any]:
    """Percentiles of divrl's cheap MPO over the valid samples (those the sanity gate rejects score 0) and the
    fraction above 0.8."""
    import numpy as np

    from divrl.tasks.molecules import MoleculeTask
    from divrl.tasks.molecules.chem import canonicalize

    valid = [c for c in map(canonicalize, samples) if c is not None]
    if not valid:
        return {"valid_scored": 0}
    scores = np.array(MoleculeTask().scorer.score(valid))
    return {"valid_scored": int(len(scores)), **{f"p{p:g}": float(np.percentile(scores, p)) for p in PERCENTILES},
            "above_0.8": float((scores > 0.8).mean())}


def pmo_distribution(samples: list[str], limit: int = 2000) -> dict[str, dict[str, float]]:
    """Per PMO oracle, percentiles and max of its score over the first `limit` distinct valid samples: where the
    prior already hits, and where a threshold would be hard to reach."""
    import numpy as np

    from divrl.tasks.molecules.chem import canonicalize
    from divrl.tasks.molecules.pmo import PMO_ORACLES, PMOOracle

    distinct = list(dict.fromkeys(c for c in map(canonicalize, samples) if c is not None))[:limit]
    result = {}
    for name in PMO_ORACLES:
        oracle = PMOOracle(name)
        scores = np.array([oracle(smiles) for smiles in distinct])
        result[name] = {"molecules": len(scores), **{f"p{p:g}": float(np.percentile(scores, p)) for p in PERCENTILES},
                        "max": float(scores.max())}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:smiles-clm")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-fcd", action="store_true", help="skip FCD (ChemNet over MOSES test: minutes, once)")
    parser.add_argument("--name", default="clm_prior", help="results file stem")
    parser.add_argument("--update-card", action="store_true",
                        help="also write the metrics into the model's card (README.md beside its weights)")
    args = parser.parse_args()

    import torch

    from divrl.models import load_model_and_tokenizer
    from divrl.tasks.molecules.pretrain import sample_smiles

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model_and_tokenizer(args.model, quantize="none", dtype="float32", cpu=True)
    started = time.monotonic()
    samples = sample_smiles(model, tokenizer, args.samples, seed=args.seed)
    sampling_s = time.monotonic() - started
    print(f"sampled {len(samples):,} SMILES in {sampling_s:.0f} s", flush=True)
    metrics = moses_metrics(samples, with_fcd=not args.no_fcd)
    scores = mpo_distribution(samples)
    pmo = pmo_distribution(samples)
    card = _card(args.model)
    result = {
        "benchmark": "clm_prior", "model": args.model, "model_sha256": card.get("sha256"),
        "pretraining": card.get("pretraining"), "seed": args.seed, "temperature": 1.0,
        "sampling_s": sampling_s, "threads": torch.get_num_threads(), "moses": metrics, "mpo": scores, "pmo": pmo,
        "anchor_charrnn": CHARRNN, "target": TARGET,
        "target_reached": metrics["validity"] >= TARGET["validity"]
        and metrics.get("unique_at_10k", 0.0) >= TARGET["unique_at_10k"],
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__},
        "date": datetime.date.today().isoformat(),
        "command": f"python benchmarks/clm_prior.py --samples {args.samples} --seed {args.seed}"
                   + (" --no-fcd" if args.no_fcd else ""),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(render(result))
    print(render(result))
    if args.update_card:
        update_card(args.model, result)


def update_card(model: str, result: dict[str, Any]) -> None:
    """Rewrite the model's card with the prior-quality section this run measured."""
    from divrl.models import resolve_model_name
    from divrl.tasks.molecules.pretrain import model_card

    path = Path(resolve_model_name(model))
    summary = json.loads((path / "pretraining.json").read_text())
    section = render(result).split("\n", 2)[2]  # the section without its title: the card has its own heading
    (path / "README.md").write_text(model_card(summary, {"text": section}))
    print(f"updated {path / 'README.md'}")


def _card(model: str) -> dict[str, Any]:
    """The shipped model's weights sha256 and pretraining summary (empty for other models)."""
    from divrl.models import resolve_model_name
    from divrl.tasks.molecules.moses import sha256_file

    path = Path(resolve_model_name(model))
    facts: dict[str, Any] = {}
    if (path / "model.safetensors").is_file():
        facts["sha256"] = sha256_file(path / "model.safetensors")
    if (path / "pretraining.json").is_file():
        summary = json.loads((path / "pretraining.json").read_text())
        facts["pretraining"] = {k: summary[k] for k in ("parameters", "steps", "molecules_seen", "tokens_seen",
                                                        "hours", "command") if k in summary}
    return facts


def render(result: dict[str, Any]) -> str:
    """The results section for BENCHMARKS.md."""
    metrics, mpo = result["moses"], result["mpo"]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    rows = [("validity", "validity"), ("unique@10k", "unique_at_10k"), ("novelty (vs MOSES train)", "novelty"),
            ("IntDiv", "intdiv"), ("IntDiv2", "intdiv2"), ("Frag/Test", "frag_test"), ("Scaf/Test", "scaf_test"),
            ("FCD/Test (10k of test; lower is better)", "fcd_test")]
    lines = [
        "## Chemical LM prior (`embedded:smiles-clm`): MOSES metrics",
        "",
        f"`{result['command']}` on {result['date']}: {metrics['samples']:,} samples at temperature 1 from BOS, "
        f"{result['threads']} threads, {result['machine']['cpu']}. Weights sha256 `{result['model_sha256']}`.",
        "",
        "| metric | this prior | MOSES CharRNN |",
        "|---|---|---|",
    ]
    for label, key in rows:
        anchor = CHARRNN.get(key)
        lines.append(f"| {label} | {fmt(metrics.get(key))} | {fmt(anchor) if anchor is not None else ''} |")
    reached = "reached" if result["target_reached"] else "NOT reached"
    lines += ["", f"Target validity >= {TARGET['validity']} and unique@10k >= {TARGET['unique_at_10k']}: {reached}."]
    if "p50" in mpo:
        lines += ["", f"divrl's cheap MPO over the {mpo['valid_scored']:,} valid samples (sanity-gate rejects at 0): "
                  + ", ".join(f"p{p:g} {mpo[f'p{p:g}']:.3f}" for p in PERCENTILES)
                  + f"; {mpo['above_0.8']:.1%} above 0.8 (saturated: a threshold there counts valid samples)."]
    if result.get("pmo"):
        rows = next(iter(result["pmo"].values()))["molecules"]
        lines += ["", f"PMO oracles over the first {rows:,} distinct valid samples (where a threshold above the "
                  "prior's p99 is a discovery; `docs/pmo.md` for the oracles):", "",
                  "| oracle | p50 | p90 | p99 | p99.9 | max |", "|---|---|---|---|---|---|"]
        for name, row in result["pmo"].items():
            lines.append(f"| {name} | " + " | ".join(f"{row[key]:.3f}" for key in ("p50", "p90", "p99", "p99.9", "max"))
                         + " |")
    if result.get("pretraining"):
        pre = result["pretraining"]
        lines += ["", f"Pretraining: {pre.get('parameters', 0):,} parameters, {pre.get('steps', 0):,} steps, "
                  f"{pre.get('molecules_seen', 0):,} molecules ({pre.get('tokens_seen', 0):,} tokens), "
                  f"{pre.get('hours', 0):.2f} h on this kind of machine: `{pre.get('command', '')}`."]
    sampled = f"Sampling {metrics['samples']:,} molecules took {result['sampling_s']:.0f} s."
    return "\n".join(lines + ["", sampled, ""])


if __name__ == "__main__":
    main()
