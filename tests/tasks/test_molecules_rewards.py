"""Reward components agree with RDKit; the MPO is the weighted geometric mean of the IPS paper, Eq. 11."""

from __future__ import annotations

import logging
import math

import pytest
from rdkit import Chem
from rdkit.Chem import QED, rdMolDescriptors
from rdkit.Contrib.SA_Score import sascorer

from divrl.tasks.molecules.rewards import MPO, HBDStep, normalised_sa, qed

KNOWN = {
    "aspirin": "CC(=O)Oc1ccccc1C(=O)O",
    "caffeine": "Cn1c(=O)c2c(ncn2C)n(C)c1=O",
    "paracetamol": "CC(=O)Nc1ccc(O)cc1",
    "ibuprofen": "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "glucose": "OC[C@H]1OC(O)[C@H](O)[C@@H](O)[C@@H]1O",
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_components_agree_with_rdkit(name: str) -> None:
    mol = Chem.MolFromSmiles(KNOWN[name])
    assert qed(mol) == pytest.approx(QED.qed(mol), abs=1e-12)
    assert normalised_sa(mol) == pytest.approx((10 - sascorer.calculateScore(mol)) / 9, abs=1e-12)
    assert HBDStep(3)(mol) == float(rdMolDescriptors.CalcNumHBD(mol) <= 3)
    scores = MPO(("qed", "sa", "hbd")).component_scores(KNOWN[name])
    assert scores == {"qed": qed(mol), "sa": normalised_sa(mol), "hbd": HBDStep(3)(mol)}


def test_literature_values() -> None:
    """Widely quoted values: aspirin's QED is ~0.55; glucose has 5 H-bond donors."""
    assert qed(Chem.MolFromSmiles(KNOWN["aspirin"])) == pytest.approx(0.55, abs=0.01)
    glucose = Chem.MolFromSmiles(KNOWN["glucose"])
    assert HBDStep(3)(glucose) == 0.0 and HBDStep(5)(glucose) == 1.0
    assert 0.0 <= normalised_sa(glucose) <= 1.0


def test_mpo_is_weighted_geometric_mean() -> None:
    parts = MPO().component_scores(KNOWN["aspirin"])
    assert MPO()(KNOWN["aspirin"]) == pytest.approx((parts["qed"] * parts["sa"] * parts["hbd"]) ** (1 / 3))
    weighted = MPO(("qed", "sa"), weights={"qed": 3.0, "sa": 1.0})
    assert weighted(KNOWN["aspirin"]) == pytest.approx(parts["qed"] ** 0.75 * parts["sa"] ** 0.25)
    assert MPO(("qed",))(KNOWN["aspirin"]) == pytest.approx(parts["qed"])
    assert MPO(("validity",))(KNOWN["aspirin"]) == 1.0
    assert MPO()(KNOWN["glucose"]) == 0.0  # the HBD step is a hard constraint
    assert MPO(hbd_threshold=5)(KNOWN["glucose"]) > 0.0
    assert MPO(("qed", "hbd"), weights={"hbd": 0.0})(KNOWN["glucose"]) == pytest.approx(
        MPO(("qed",))(KNOWN["glucose"])
    )  # a zero-weight component cannot veto


def test_invalid_smiles_score_zero() -> None:
    mpo = MPO(("validity", "qed"))
    for junk in ["", "C1CC", "not a molecule", "[H][H]"]:
        assert mpo(junk) == 0.0 and mpo.component_scores(junk) is None


def test_extra_components_plug_in_and_receive_canonical_smiles() -> None:
    seen: list[str] = []

    def docking_stub(smiles: str) -> float:
        seen.append(smiles)
        return 0.5

    mpo = MPO(("qed",), extra_components={"docking": docking_stub})
    value = mpo("OC(=O)c1ccccc1OC(C)=O")  # a non-canonical spelling of aspirin
    assert seen == [Chem.MolToSmiles(Chem.MolFromSmiles(KNOWN["aspirin"]))]
    assert value == pytest.approx(math.sqrt(qed(Chem.MolFromSmiles(KNOWN["aspirin"])) * 0.5))
    assert mpo.names == ("qed", "docking")


def test_failing_extra_component_scores_zero_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    def broken(smiles: str) -> float:
        raise RuntimeError("docking crashed")

    mpo = MPO(("qed",), extra_components={"docking": broken, "too_big": lambda s: 1.5})
    with caplog.at_level(logging.WARNING):
        assert mpo(KNOWN["aspirin"]) == 0.0
        assert mpo(KNOWN["caffeine"]) == 0.0
    assert mpo.failures == {"docking": 2, "too_big": 2}
    assert sum("docking" in r.message for r in caplog.records) == 1
    assert sum("too_big" in r.message for r in caplog.records) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"components": ("qed", "docking")}, "unknown MPO component"),
        ({"components": ()}, "at least one component"),
        ({"extra_components": {"qed": lambda s: 1.0}}, "clash"),
        ({"extra_components": {"dock": 3}}, "must be callables"),
        ({"weights": {"logp": 1.0}}, "unknown component"),
        ({"weights": {"qed": -1.0}}, "weights must be finite"),
        ({"weights": {"qed": 0.0, "sa": 0.0, "hbd": 0.0}}, "not all zero"),
        ({"hbd_threshold": -1}, "hbd_threshold"),
    ],
)
def test_mpo_misconfiguration_is_a_clear_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MPO(**kwargs)
