"""PMO's RDKit-only oracles against reference values computed once with GuacaMol 0.5.5's own objectives, each
cross-checked against TDC 1.1.15's oracle code (tests/fixtures/pmo_reference.json; RDKit 2026.09.1), and the molecule
task's `objective` setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divrl.tasks.molecules.pmo import NEEDS_DOWNLOAD, PMO_ORACLES, PMOOracle

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "pmo_reference.json").read_text())


def test_the_fixture_covers_every_oracle() -> None:
    assert set(FIXTURE["scores"]) == set(PMO_ORACLES) and len(PMO_ORACLES) == 20


@pytest.mark.parametrize("name", PMO_ORACLES)
def test_oracle_matches_the_reference_implementation(name: str) -> None:
    oracle = PMOOracle(name)
    for smiles, expected in FIXTURE["scores"][name].items():
        assert oracle(smiles) == pytest.approx(expected, abs=1e-6), smiles


def test_targets_score_one_on_their_own_task_and_anything_else_scores_a_number() -> None:
    from divrl.tasks.molecules import pmo

    assert PMOOracle("celecoxib_rediscovery")(pmo.CELECOXIB) == pytest.approx(1.0)
    assert PMOOracle("albuterol_similarity")(pmo.ALBUTEROL) == pytest.approx(1.0)
    for garbage in ["", "   ", "not_a_smiles", "C1CC", "c1cccc1", "[Xx]", "C" * 500, None, 3.5, "CC(=O)O\nCCO"]:
        for name in ("qed", "median1", "deco_hop", "isomers_c7h8n2o2"):
            score = PMOOracle(name)(garbage)
            assert isinstance(score, float) and 0.0 <= score <= 1.0, (name, garbage)
    # divrl's guard: the hops' pharmacophore fingerprint is not computed past 50 heavy atoms (it takes minutes)
    assert PMOOracle("scaffold_hop")("C" * 51) == 0.0 < PMOOracle("scaffold_hop")("C" * 50)
    for smiles in FIXTURE["invalid_smiles"]["smiles"]:
        assert PMOOracle("qed")(smiles) == FIXTURE["invalid_smiles"]["pmo_tdc_value"] == 0.0


def test_unknown_and_downloaded_oracles_are_named() -> None:
    with pytest.raises(ValueError, match="unknown PMO oracle 'osimertinib'"):
        PMOOracle("osimertinib")
    for name in NEEDS_DOWNLOAD:
        with pytest.raises(ValueError, match="needs a trained model downloaded"):
            PMOOracle(name)


def test_the_molecule_task_scores_with_a_pmo_objective_and_refuses_mpo_settings(tmp_path: Path) -> None:
    import pickle

    from divrl.tasks.molecules import MoleculeTask

    task = MoleculeTask(objective="median1")
    camphor = FIXTURE["scores"]["median1"]
    assert task.scorer.score(["CC1(C)C2CCC1(C)C(=O)C2"]) == [pytest.approx(camphor["CC1(C)C2CCC1(C)C(=O)C2"])]
    assert pickle.loads(pickle.dumps(task.objective))("CCO") == task.objective("CCO")  # process pools pickle it
    with pytest.raises(ValueError, match="hbd_threshold=2 configure divrl's MPO"):
        MoleculeTask(objective="qed", hbd_threshold=2)
    other = MoleculeTask(objective="median2")
    with pytest.raises(ValueError, match="objective"):
        other.load_state_dict(task.state_dict())  # cached scores of another objective are refused


def test_auc_top_k_follows_pmo_by_hand() -> None:
    """k = 2, sampled every 2 calls, budget 6: top-2 mean 0.5 after 2 calls and 0.7 after 4; trapezoids from (0, 0):
    2 x (0 + 0.5) / 2 + 2 x (0.5 + 0.7) / 2 = 1.7, then the stopped run holds 0.7 for 2 more calls (+1.4): 3.1 / 6."""
    from divrl.tasks.molecules.metrics import auc_top_k

    history = [("a", 0.2), ("b", 0.8), ("c", 0.4), ("d", 0.6)]
    assert auc_top_k(history, budget=6, k=2, every=2) == pytest.approx(3.1 / 6)
    assert auc_top_k(history, budget=6, k=2, every=2, finish=False) == pytest.approx(1.7 / 6)
    assert auc_top_k(history, budget=4, k=2, every=2) == pytest.approx(1.7 / 4)
    # a full run of constant score s has AUC s less the ramp of the first interval: s (1 - every / (2 budget))
    flat = [(str(i), 0.9) for i in range(1000)]
    assert auc_top_k(flat, budget=1000) == pytest.approx(0.9 * (1 - 100 / 2000))
    assert auc_top_k(flat + [("x", 1.0)] * 5, budget=1000) == auc_top_k(flat, budget=1000)  # calls past the budget
    assert auc_top_k([], budget=10) == 0.0
    with pytest.raises(ValueError, match="budget"):
        auc_top_k(history, budget=0)
