"""Discovery metrics: validity, uniqueness, novelty, internal diversity, iSIM, #Circles, Generative Yield,
Oracle Burden.

Internal diversity comes in two conventions that give different numbers on the same molecules, so
each has its own function and the name says which:
- MOSES (`intdiv_moses`): Morgan radius 2, 1024 bits, over the valid molecules WITH duplicates,
  mean over all N^2 pairs including the diagonal; IntDiv_p = 1 - mean_i (mean_j T_ij^p)^(1/p)
  (IntDiv = p 1, IntDiv2 = p 2).
- TDC/PMO (`intdiv_tdc`): Morgan radius 2, 2048 bits, over the UNIQUE valid molecules, mean of
  1 - T_ij over the pairs i < j.
Two more set-level measures users compare with, over the unique valid molecules (Morgan radius 2, 2048 bits):
- iSIM (`isim_tanimoto`, Miranda-Quintana et al. 2024): the average pairwise Tanimoto similarity in O(N) from the
  fingerprint bits' column sums k_j: sum_j k_j (k_j - 1) / 2 over sum_j [k_j (k_j - 1) / 2 + k_j (N - k_j)].
- #Circles (`circles`, Xie et al. 2023): how many molecules can be picked with every pairwise Tanimoto distance
  above a threshold t (0.75 by default): chemical-space coverage that grows only with genuinely new molecules.
  Found greedily in canonical-SMILES order, so it is a lower bound of the exact (NP-hard) maximum.
Uniqueness also comes in two conventions: `uniqueness` (metrics key "uniqueness") is MOSES'
unique@all, distinct valid / valid molecules; `sample_uniqueness` (key "sample_uniqueness") is
distinct valid molecules / all samples, the definition in the project notes, which also drops when
the model writes fewer valid molecules.
Yield, Oracle Burden and PMO's AUC top-10 (`auc_top_k`) read an oracle-call history (`CachedScorer.history`, or any
sequence of (smiles, score) pairs in call order): only real oracle calls consume budget. Their thresholds tau are
rewards in [0, 1): a molecule counts when its reward is strictly above tau. MOSES's Frag and Scaf
(`fragment_counts`, `scaffold_counts`, `count_cosine`) compare a generated set with a reference set by the cosine of
their BRICS-fragment and Murcko-scaffold count profiles.
"""

from __future__ import annotations

import heapq
import math
import numbers
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from divrl.tasks.molecules.chem import canonicalize

History = Sequence[tuple[str, float]]


def _valid_canonical(smiles: Iterable[str | None]) -> list[str]:
    """Canonical SMILES of the valid entries, duplicates and order kept."""
    canonical = (canonicalize(s) for s in smiles)
    return [c for c in canonical if c is not None]


def validity(smiles: Sequence[str | None]) -> float:
    """Fraction of entries that are valid molecules (None counts as invalid)."""
    if not smiles:
        raise ValueError("validity of an empty list of molecules is undefined")
    return len(_valid_canonical(smiles)) / len(smiles)


def uniqueness(smiles: Sequence[str | None]) -> float:
    """Distinct valid molecules / valid molecules (MOSES unique@all); 0 when none is valid."""
    valid = _valid_canonical(smiles)
    return len(set(valid)) / len(valid) if valid else 0.0


def sample_uniqueness(smiles: Sequence[str | None]) -> float:
    """Distinct valid molecules / all samples (invalid ones included, as the project notes define it)."""
    if not smiles:
        raise ValueError("uniqueness of an empty list of molecules is undefined")
    return len(set(_valid_canonical(smiles))) / len(smiles)


def novelty(smiles: Sequence[str | None], reference: Iterable[str], reference_canonical: bool = False) -> float:
    """Fraction of the distinct valid molecules absent from `reference` (compared canonically); 0 if none.

    `reference_canonical=True` skips canonicalising a reference that already is (e.g. `reference_smiles()`).
    """
    generated = set(_valid_canonical(smiles))
    if not generated:
        return 0.0
    known = set(reference) if reference_canonical else set(_valid_canonical(reference))
    return len(generated - known) / len(generated)


def _morgan_bits(canonical: Sequence[str], n_bits: int) -> np.ndarray:
    """Morgan radius-2 bit fingerprints (no chirality) as a (N, n_bits) 0/1 float array."""
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=n_bits)
    return np.array([generator.GetFingerprintAsNumPy(Chem.MolFromSmiles(s)) for s in canonical], dtype=np.float64)


def intdiv_moses(smiles: Sequence[str | None], p: int = 1, block: int = 1024) -> float | None:
    """MOSES IntDiv_p (1024-bit Morgan r2, valid molecules with duplicates, all N^2 pairs); None if no valid."""
    valid = _valid_canonical(smiles)
    if not valid:
        return None
    bits = _morgan_bits(valid, 1024)
    counts = bits.sum(axis=1)
    per_molecule = np.empty(len(valid))
    for start in range(0, len(valid), block):  # row blocks keep memory at block x N
        shared = bits[start : start + block] @ bits.T
        union = counts[start : start + block, None] + counts[None, :] - shared
        tanimoto = np.divide(shared, union, out=np.ones_like(shared), where=union > 0)  # 0/0 -> 1, as MOSES
        per_molecule[start : start + block] = np.mean(tanimoto**p, axis=1) ** (1.0 / p)
    return float(1.0 - per_molecule.mean())


def isim_from_bits(bits: np.ndarray) -> float:
    """iSIM Tanimoto of a (N >= 2, n_bits) 0/1 fingerprint matrix: shared on-bit pairs over all compared bit pairs,
    counted per column; 1.0 for identical fingerprints (and for fingerprints with no bit set, as MOSES' 0/0)."""
    n = bits.shape[0]
    if n < 2:
        raise ValueError(f"iSIM compares at least two fingerprints, got {n}")
    on = bits.sum(axis=0)
    shared = (on * (on - 1) / 2).sum()
    compared = shared + (on * (n - on)).sum()
    return float(shared / compared) if compared > 0 else 1.0


def isim_tanimoto(smiles: Sequence[str | None]) -> float | None:
    """iSIM average Tanimoto similarity of the unique valid molecules (2048-bit Morgan r2); None if < 2 unique."""
    unique = sorted(set(_valid_canonical(smiles)))
    return None if len(unique) < 2 else isim_from_bits(_morgan_bits(unique, 2048))


def circles(smiles: Sequence[str | None], threshold: float = 0.75) -> int:
    """#Circles: molecules picked greedily (canonical-SMILES order) among the unique valid ones so that every two
    picked are more than `threshold` apart in Tanimoto distance (2048-bit Morgan r2); 0 with none valid."""
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"#Circles threshold is a Tanimoto distance in [0, 1), got {threshold}")
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    picked: list = []
    for canonical in sorted(set(_valid_canonical(smiles))):
        fingerprint = generator.GetFingerprint(Chem.MolFromSmiles(canonical))
        if all(1.0 - t > threshold for t in DataStructs.BulkTanimotoSimilarity(fingerprint, picked)):
            picked.append(fingerprint)
    return len(picked)


def intdiv_tdc(smiles: Sequence[str | None]) -> float | None:
    """TDC/PMO diversity (2048-bit Morgan r2, unique valid molecules, pairs i < j); None if < 2 unique."""
    unique = sorted(set(_valid_canonical(smiles)))
    if len(unique) < 2:
        return None
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fps = [generator.GetFingerprint(Chem.MolFromSmiles(s)) for s in unique]
    total = sum(sum(DataStructs.BulkTanimotoSimilarity(fps[i], fps[:i])) for i in range(1, len(fps)))
    pairs = len(fps) * (len(fps) - 1) / 2
    return float(1.0 - total / pairs)


def fragment_counts(smiles: Iterable[str | None]) -> Counter[str]:
    """MOSES's fragment profile: BRICS fragments (`FragmentOnBRICSBonds`, dummy atoms kept) of each valid molecule,
    counted over the molecules with their duplicates."""
    from rdkit.Chem import AllChem

    counts: Counter[str] = Counter()
    for canonical in _valid_canonical(smiles):
        counts.update(Chem.MolToSmiles(AllChem.FragmentOnBRICSBonds(Chem.MolFromSmiles(canonical))).split("."))
    return counts


def scaffold_counts(smiles: Iterable[str | None], min_rings: int = 2) -> Counter[str]:
    """MOSES's scaffold profile: Bemis-Murcko scaffolds with at least `min_rings` rings, counted over the valid
    molecules with their duplicates (molecules with fewer rings count nowhere)."""
    from rdkit.Chem.Scaffolds import MurckoScaffold

    counts: Counter[str] = Counter()
    for canonical in _valid_canonical(smiles):
        scaffold = MurckoScaffold.GetScaffoldForMol(Chem.MolFromSmiles(canonical))
        text = Chem.MolToSmiles(scaffold)
        if text and scaffold.GetRingInfo().NumRings() >= min_rings:
            counts[text] += 1
    return counts


def count_cosine(first: Counter[str], second: Counter[str]) -> float | None:
    """Cosine similarity of two count profiles over the union of their keys (MOSES's Frag and Scaf, generated
    against a reference set); None when either profile is empty."""
    if not first or not second:
        return None
    dot = sum(count * second[key] for key, count in first.items() if key in second)
    norm = math.sqrt(sum(c * c for c in first.values())) * math.sqrt(sum(c * c for c in second.values()))
    return float(dot / norm)


def check_taus(taus: Sequence[float]) -> None:
    """Raise a ValueError unless every tau is a finite reward threshold in [0, 1) (rewards lie in [0, 1])."""
    for tau in taus:
        if isinstance(tau, bool) or not isinstance(tau, numbers.Real) or not (math.isfinite(tau) and 0 <= tau < 1):
            raise ValueError(f"tau must be a finite reward threshold in [0, 1), got {tau!r}")


def check_budget(budget: int | None) -> None:
    """Raise a ValueError unless `budget` is None or a positive number of oracle calls."""
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 1):
        raise ValueError(f"budget must be a positive number of oracle calls, got {budget!r}")


def yield_curve(history: History, tau: float) -> list[int]:
    """Number of distinct molecules with score > tau found after each oracle call."""
    found: set[str] = set()
    curve = []
    for smiles, score in history:
        if score > tau:
            found.add(smiles)
        curve.append(len(found))
    return curve


def generative_yield(history: History, tau: float, budget: int | None = None) -> int:
    """Generative Yield@tau: distinct molecules with score > tau within the first `budget` oracle calls."""
    if budget is not None and budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    calls = history if budget is None else history[:budget]
    return len({smiles for smiles, score in calls if score > tau})


def oracle_burden(history: History, tau: float, n: int = 100) -> int | None:
    """Oracle Burden OB_tau(n): oracle calls needed to find n distinct molecules with score > tau;
    None when the history never gets there."""
    if n < 1:
        raise ValueError(f"oracle burden needs n >= 1, got {n}")
    for calls, found in enumerate(yield_curve(history, tau), start=1):
        if found >= n:
            return calls
    return None


def auc_top_k(history: History, budget: int, k: int = 10, every: int = 100, finish: bool = True) -> float:
    """PMO's AUC top-k (mol_opt `main/optimizer.py` `top_auc`, its headline metric with k = 10): the mean of the k best
    scores found so far, sampled every `every` calls (and at the last call), integrated by the trapezoid rule from
    (0, 0) over the first `budget` calls of `history` and divided by `budget`. A run that stopped short keeps its
    last top-k mean to the budget (`finish`, as PMO scores finished runs) or counts the rest as 0. In [0, 1] for
    scores in [0, 1]; with fewer than k molecules, the mean of those found."""
    check_budget(budget)
    if k < 1 or every < 1:
        raise ValueError(f"auc_top_k needs k >= 1 and every >= 1, got k={k}, every={every}")
    calls = history[:budget]
    if not calls:
        return 0.0
    best: list[float] = []  # min-heap of the k best scores so far
    area, previous, sampled = 0.0, 0.0, 0
    for index, (_, score) in enumerate(calls, start=1):
        if len(best) < k:
            heapq.heappush(best, float(score))
        elif score > best[0]:
            heapq.heapreplace(best, float(score))
        if index % every == 0 and index < len(calls):
            current = sum(best) / len(best)
            area += every * (current + previous) / 2
            previous, sampled = current, index
    current = sum(best) / len(best)
    area += (len(calls) - sampled) * (current + previous) / 2
    if finish and len(calls) < budget:
        area += (budget - len(calls)) * current
    return area / budget


def molecule_metrics(
    smiles: Sequence[str | None],
    scores: Sequence[float],
    history: History,
    reference: Iterable[str],
    taus: Sequence[float] = (0.8, 0.85),
    ob_n: int = 100,
    reference_canonical: bool = False,
    budget: int | None = None,
) -> dict:
    """All metrics of one sample: per-sample SMILES (None = nothing extracted), their scores, and the
    oracle-call history that produced them (see `novelty` for `reference_canonical`). JSON-able;
    undefined values are None. "uniqueness" is MOSES' (over valid molecules), "sample_uniqueness" the
    notes' (over all samples); with `budget`, "yield_<budget>_calls" is Generative Yield within that
    many oracle calls."""
    if len(smiles) != len(scores):
        raise ValueError(f"got {len(smiles)} SMILES but {len(scores)} scores")
    check_taus(taus)
    check_budget(budget)
    values = np.asarray(scores, dtype=np.float64)
    metrics = {
        "samples": len(smiles),
        "validity": validity(smiles),
        "uniqueness": uniqueness(smiles),
        "sample_uniqueness": sample_uniqueness(smiles),
        "novelty": novelty(smiles, reference, reference_canonical),
        "intdiv_moses": intdiv_moses(smiles, p=1),
        "intdiv2_moses": intdiv_moses(smiles, p=2),
        "intdiv_tdc": intdiv_tdc(smiles),
        "isim_tanimoto": isim_tanimoto(smiles),
        "circles": circles(smiles),
        "reward": {
            "mean": float(values.mean()),
            "std": float(values.std()),
            "max": float(values.max()),
            "quantiles": {f"q{int(q * 100)}": float(np.quantile(values, q)) for q in (0.1, 0.25, 0.5, 0.75, 0.9)},
        },
        "oracle_calls": len(history),
        "yield": {str(tau): generative_yield(history, tau) for tau in taus},
        f"oracle_burden_{ob_n}": {str(tau): oracle_burden(history, tau, ob_n) for tau in taus},
    }
    if budget is not None:
        metrics[f"yield_{budget}_calls"] = {str(tau): generative_yield(history, tau, budget) for tau in taus}
    # PMO's AUC top-10 over the budget (a run that stopped short holds its last top-10), else over the calls made
    metrics["auc_top10"] = auc_top_k(history, budget or max(1, len(history)))
    return metrics
