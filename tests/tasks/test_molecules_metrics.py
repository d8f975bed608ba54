"""Discovery metrics against hand computation and brute-force internal diversity in both conventions."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from rdkit import Chem, DataStructs
from rdkit.Chem import rdFingerprintGenerator

from divrl.tasks.molecules.metrics import (
    circles,
    generative_yield,
    intdiv_moses,
    intdiv_tdc,
    isim_from_bits,
    isim_tanimoto,
    molecule_metrics,
    novelty,
    oracle_burden,
    sample_uniqueness,
    uniqueness,
    validity,
    yield_curve,
)
from divrl.tasks.molecules.scoring import CachedScorer

SAMPLE = [
    "CC(=O)Oc1ccccc1C(=O)O",
    "OC(=O)c1ccccc1OC(C)=O",  # aspirin again, spelled differently
    "Cn1c(=O)c2c(ncn2C)n(C)c1=O",
    "CC(=O)Nc1ccc(O)cc1",
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "c1ccc2ccccc2c1",
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol again
    "C1CC",  # invalid
    None,  # nothing extracted
]


def _fingerprints(smiles: list[str], n_bits: int) -> list:
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=n_bits)
    return [generator.GetFingerprint(Chem.MolFromSmiles(s)) for s in smiles]


def test_validity_uniqueness_novelty_by_hand() -> None:
    assert validity(SAMPLE) == pytest.approx(7 / 9)
    assert uniqueness(SAMPLE) == pytest.approx(5 / 7)  # 5 distinct among 7 valid
    reference = ["O=C(C)Oc1ccccc1C(O)=O", "c1ccc2ccccc2c1", "CCCC"]  # aspirin, naphthalene, butane
    assert novelty(SAMPLE, reference) == pytest.approx(3 / 5)
    assert uniqueness([None, "C1CC"]) == 0.0 and novelty([None], reference) == 0.0
    with pytest.raises(ValueError, match="empty"):
        validity([])


def test_both_uniqueness_conventions_by_hand() -> None:
    assert uniqueness(SAMPLE) == pytest.approx(5 / 7)  # MOSES: 5 distinct among 7 valid
    assert sample_uniqueness(SAMPLE) == pytest.approx(5 / 9)  # notes: 5 distinct among 9 samples
    assert uniqueness(["CCO", None, None, None]) == 1.0 and sample_uniqueness(["CCO", None, None, None]) == 0.25
    assert sample_uniqueness([None, "C1CC"]) == 0.0
    with pytest.raises(ValueError, match="empty"):
        sample_uniqueness([])


@pytest.mark.parametrize("p", [1, 2])
def test_intdiv_moses_matches_brute_force(p: int) -> None:
    valid = [s for s in SAMPLE if s is not None and Chem.MolFromSmiles(s) is not None]
    fps = _fingerprints(valid, 1024)
    per_molecule = [np.mean([DataStructs.TanimotoSimilarity(a, b) ** p for b in fps]) ** (1 / p) for a in fps]
    assert intdiv_moses(SAMPLE, p=p) == pytest.approx(1 - np.mean(per_molecule), abs=1e-12)
    assert intdiv_moses(SAMPLE, p=p, block=2) == pytest.approx(intdiv_moses(SAMPLE, p=p), abs=1e-12)


def test_intdiv_tdc_matches_brute_force() -> None:
    unique = sorted({Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in SAMPLE[:7]})
    fps = _fingerprints(unique, 2048)
    pairs = [DataStructs.TanimotoSimilarity(a, b) for a, b in itertools.combinations(fps, 2)]
    assert len(pairs) == 10
    assert intdiv_tdc(SAMPLE) == pytest.approx(1 - np.mean(pairs), abs=1e-12)


def test_conventions_differ_where_they_should() -> None:
    """MOSES counts duplicates and the diagonal; TDC uses distinct molecules and i < j only."""
    pair = ["CCO", "c1ccccc1"]
    assert intdiv_moses(["CCO", "OCC"]) == pytest.approx(0.0)  # all pairs identical
    assert intdiv_tdc(["CCO", "OCC"]) is None  # a single distinct molecule has no pair
    t = DataStructs.TanimotoSimilarity(*_fingerprints(pair, 1024))
    assert intdiv_moses(pair) == pytest.approx(1 - (1 + t) / 2)
    assert intdiv_tdc(pair) == pytest.approx(1 - DataStructs.TanimotoSimilarity(*_fingerprints(pair, 2048)))
    assert intdiv_moses([None, "junk"]) is None


HISTORY = [("A", 0.9), ("B", 0.5), ("C", 0.85), ("D", 0.95), ("E", 0.8), ("F", 0.99)]


def test_yield_and_burden_on_a_crafted_history() -> None:
    assert yield_curve(HISTORY, 0.8) == [1, 1, 2, 3, 3, 4]  # E scores exactly tau: not above it
    assert generative_yield(HISTORY, 0.8) == 4
    assert generative_yield(HISTORY, 0.8, budget=3) == 2
    assert generative_yield(HISTORY, 0.9) == 2
    assert generative_yield(HISTORY, 0.8, budget=0) == 0
    assert oracle_burden(HISTORY, 0.8, n=1) == 1
    assert oracle_burden(HISTORY, 0.8, n=2) == 3
    assert oracle_burden(HISTORY, 0.8, n=4) == 6
    assert oracle_burden(HISTORY, 0.8, n=5) is None
    assert generative_yield([("A", 0.9), ("A", 0.9)], 0.5) == 1  # a history with repeats counts them once
    with pytest.raises(ValueError, match="n >= 1"):
        oracle_burden(HISTORY, 0.8, n=0)


def test_cache_repeats_do_not_consume_oracle_budget() -> None:
    oracle_scores = {"CCO": 0.9, "CCN": 0.1, "CCC": 0.95, "CCCl": 0.99}
    scorer = CachedScorer(oracle_scores.__getitem__)
    sampled = ["CCO", "OCC", "CCN", "C(C)O", "CCC", "ClCC"]  # six samples, four distinct molecules
    scorer.score(sampled)
    assert [call.smiles for call in scorer.history] == ["CCO", "CCN", "CCC", "CCCl"]
    assert oracle_burden(scorer.history, 0.8, n=2) == 3  # the 3rd oracle call, although the 5th sample
    assert oracle_burden(scorer.history, 0.8, n=3) == 4
    assert generative_yield(scorer.history, 0.8, budget=2) == 1


def test_molecule_metrics_is_json_and_consistent() -> None:
    scorer = CachedScorer(lambda s: 0.9 if "n" in s.lower() else 0.5)
    scores = scorer.score(SAMPLE)
    metrics = molecule_metrics(SAMPLE, scores, scorer.history, ["CC(=O)Oc1ccccc1C(=O)O"], taus=(0.8,), ob_n=2)
    json.dumps(metrics, allow_nan=False)
    assert metrics["samples"] == 9 and metrics["oracle_calls"] == 5
    assert metrics["uniqueness"] == pytest.approx(5 / 7) and metrics["sample_uniqueness"] == pytest.approx(5 / 9)
    assert "yield_3_calls" not in metrics
    assert metrics["validity"] == pytest.approx(7 / 9) and metrics["novelty"] == pytest.approx(4 / 5)
    assert metrics["intdiv_tdc"] == intdiv_tdc(SAMPLE) and metrics["intdiv2_moses"] == intdiv_moses(SAMPLE, p=2)
    assert metrics["isim_tanimoto"] == isim_tanimoto(SAMPLE) and metrics["circles"] == circles(SAMPLE)
    assert metrics["yield"] == {"0.8": 2}  # caffeine and paracetamol contain N
    assert metrics["oracle_burden_2"] == {"0.8": 3}
    assert metrics["reward"]["max"] == 0.9
    with pytest.raises(ValueError, match="SMILES but"):
        molecule_metrics(SAMPLE, scores[:2], scorer.history, [])
    # Oracle calls: aspirin 0.5, caffeine 0.9, paracetamol 0.9, ...: one molecule above 0.8 within 2 calls.
    budgeted = molecule_metrics(SAMPLE, scores, scorer.history, [], taus=(0.8, 0.0), budget=2)
    assert budgeted["yield_2_calls"] == {"0.8": 1, "0.0": 2}
    assert budgeted["yield"] == {"0.8": 2, "0.0": 5}


@pytest.mark.parametrize("tau", [1.0, -0.1, float("nan"), float("inf"), "0.8", True])
def test_taus_outside_the_reward_range_are_refused(tau: object) -> None:
    with pytest.raises(ValueError, match=r"tau must be a finite reward threshold in \[0, 1\)"):
        molecule_metrics(["CCO"], [0.5], [("CCO", 0.5)], [], taus=(0.5, tau))  # type: ignore[arg-type]


@pytest.mark.parametrize("budget", [0, -3, 2.5, True])
def test_bad_budgets_are_refused(budget: object) -> None:
    with pytest.raises(ValueError, match="budget must be a positive number of oracle calls"):
        molecule_metrics(["CCO"], [0.5], [("CCO", 0.5)], [], budget=budget)  # type: ignore[arg-type]


# On-bits of AllChem.GetMorganFingerprintAsBitVect(mol, 2, nBits), the legacy call MOSES and TDC make, recorded with
# RDKit 2026.09.1: the fingerprint test stays strict on an RDKit without that API.
LEGACY_MORGAN_BITS = {
    1024: {"CC(=O)Oc1ccccc1C(=O)O": [11, 23, 33, 64, 175, 356, 386, 389, 423, 444, 456, 592, 650, 695, 705, 726, 751,
                                     807, 849, 893, 909, 946, 967, 1017],
           "Cn1c(=O)c2c(ncn2C)n(C)c1=O": [0, 33, 121, 179, 234, 283, 314, 330, 356, 378, 385, 400, 416, 428, 463, 493,
                                          504, 564, 650, 672, 771, 849, 932, 935],
           "c1ccc2ccccc2c1": [63, 64, 175, 356, 598, 726, 831, 849]},
    2048: {"CC(=O)Oc1ccccc1C(=O)O": [389, 456, 650, 695, 807, 909, 1017, 1035, 1047, 1057, 1088, 1199, 1380, 1410, 1447,
                                     1468, 1616, 1729, 1750, 1775, 1873, 1917, 1970, 1991],
           "Cn1c(=O)c2c(ncn2C)n(C)c1=O": [33, 314, 378, 400, 463, 504, 564, 650, 771, 932, 935, 1024, 1057, 1145, 1203,
                                          1258, 1307, 1354, 1380, 1409, 1440, 1452, 1517, 1696, 1873],
           "c1ccc2ccccc2c1": [598, 1087, 1088, 1199, 1380, 1750, 1855, 1873]},
}


@pytest.mark.parametrize("n_bits", [1024, 2048])
def test_fingerprints_give_the_bits_of_the_legacy_call_moses_and_tdc_make(n_bits: int) -> None:
    for smiles, expected in LEGACY_MORGAN_BITS[n_bits].items():
        assert list(_fingerprints([smiles], n_bits)[0].GetOnBits()) == expected


@pytest.mark.parametrize("n_bits", [1024, 2048])
def test_fingerprints_match_the_legacy_api_where_rdkit_still_ships_it(n_bits: int) -> None:
    """Also checks the recorded bits above, on an RDKit that has the legacy Morgan API."""
    from rdkit import rdBase
    from rdkit.Chem import AllChem

    legacy = getattr(AllChem, "GetMorganFingerprintAsBitVect", None)
    if legacy is None:
        pytest.skip("this RDKit no longer ships the legacy Morgan API (LEGACY_MORGAN_BITS keeps the check strict)")
    for smiles in [*SAMPLE[:7], *LEGACY_MORGAN_BITS[n_bits]]:
        mol = Chem.MolFromSmiles(smiles)
        with rdBase.BlockLogs():
            expected = list(legacy(mol, 2, nBits=n_bits).GetOnBits())
        assert list(_fingerprints([smiles], n_bits)[0].GetOnBits()) == expected
        assert LEGACY_MORGAN_BITS[n_bits].get(smiles, expected) == expected


def test_novelty_against_an_already_canonical_reference() -> None:
    reference = [Chem.CanonSmiles("CC(=O)Oc1ccccc1C(=O)O"), "c1ccc2ccccc2c1"]
    assert novelty(SAMPLE, reference, reference_canonical=True) == novelty(SAMPLE, reference) == pytest.approx(3 / 5)


def test_isim_counts_shared_on_bits_per_column() -> None:
    # columns: on in both (1 shared pair), on in one (1 pair compared, none shared), off in both (not compared)
    bits = np.array([[1, 1, 0], [1, 0, 0]], dtype=float)
    assert isim_from_bits(bits) == pytest.approx(1 / 2)  # two rows: iSIM equals their Tanimoto, 1 / |union| 2
    assert isim_from_bits(np.ones((4, 3))) == 1.0 and isim_from_bits(np.zeros((3, 5))) == 1.0
    with pytest.raises(ValueError, match="at least two"):
        isim_from_bits(np.ones((1, 3)))
    unique = sorted({Chem.MolToSmiles(Chem.MolFromSmiles(s)) for s in SAMPLE[:7]})
    pairs = [DataStructs.TanimotoSimilarity(a, b) for a, b in itertools.combinations(_fingerprints(unique, 2048), 2)]
    assert isim_tanimoto(SAMPLE) == pytest.approx(np.mean(pairs), abs=0.05)  # an O(N) estimate of the pair mean
    assert isim_tanimoto(["CCO", "OCC", None]) is None


def test_circles_keeps_only_molecules_far_from_every_kept_one() -> None:
    assert circles(["CCO", "OCC", "C1CC", None]) == 1  # one distinct valid molecule
    assert circles([]) == 0
    far = ["c1ccc2ccccc2c1", "CC(C)Cc1ccc(cc1)C(C)C(=O)O"]
    distance = 1 - DataStructs.TanimotoSimilarity(*_fingerprints(far, 2048))
    assert circles(far, threshold=distance - 1e-6) == 2 and circles(far, threshold=distance) == 1
    assert circles(SAMPLE, threshold=0.0) == 5  # every distinct valid molecule is a circle of radius 0
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        circles(far, threshold=1.0)
