"""Chemistry sanity gate and answer location: exotic or trivial "valid" molecules earn no molecule reward."""

from __future__ import annotations

import pytest
from rdkit import Chem

from divrl.task import build_task
from divrl.tasks.molecules import MoleculeTask
from divrl.tasks.molecules.chem import answer_smiles, clear_extraction_cache, extract_smiles
from divrl.tasks.molecules.data import base_prompt, build_rows, few_shot_pool
from divrl.tasks.molecules.evaluate import evaluate_molecules
from divrl.tasks.molecules.rewards import MPO
from divrl.tasks.molecules.sanity import REJECTION_KINDS, ChemistryGate
from divrl.tasks.molecules.scoring import CachedScorer

PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"
ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
# What RDKit accepts but no drug-like reward should pay for, with the rule that rejects it.
EXOTIC = {
    "[C+15]C[C-15]": "formal_charge",
    "CCCCCCCC[N+2]CC": "formal_charge",
    "C[Og]C": "element",
    "[Uuo]": "element",
    "CCCCCCCC[Fe]CCC": "element",
    "CCOC(=O)C(C#N->[Fe])=Cc1ccc([N+](=O)[O-])o1": "element",  # dative-bond soup around a metal
    "CCCCCCCCN->B(C)C": "dative_bond",  # allowed elements, but a coordination bond
    "CCCCCCC[CH]CC": "radical",
    "CO": "too_small",  # methanol: what the base model's " An = C(O) - C(N) or ..." used to score as (0.68)
    "CN=O": "too_small",
    "C=O": "too_small",
    "c1ccccc1": "too_small",
}


@pytest.mark.parametrize("smiles, kind", EXOTIC.items())
def test_default_mpo_pays_nothing_for_exotic_or_trivial_molecules(smiles: str, kind: str) -> None:
    mpo = MPO()
    assert Chem.MolFromSmiles(smiles) is not None  # RDKit calls it valid
    assert mpo(smiles) == 0.0
    reason = mpo.rejection(smiles)
    assert reason is not None and reason.split(":")[0] == kind and kind in REJECTION_KINDS
    assert MPO(sanity=None)(smiles) > 0.0  # without the gate it earns reward


def test_drug_like_molecules_pass_the_gate() -> None:
    mpo = MPO()
    for smiles in [PARACETAMOL, ASPIRIN, "O=[N+]([O-])c1ccc(Cl)cc1CC", "C[N+](C)(C)CCCCCCC", "OB(O)c1ccccc1CCN"]:
        assert mpo.rejection(smiles) is None and mpo(smiles) > 0.0, smiles
    assert all(mpo.rejection(s) is None for s in few_shot_pool())  # every few-shot example passes


def test_gate_is_configurable_and_only_on_by_default_for_drug_like_components() -> None:
    assert MPO().sanity == ChemistryGate() and MPO(["qed"]).sanity is not None
    assert MPO(["validity"]).sanity is None  # a validity-only reward keeps RDKit's notion of valid
    assert MPO(["validity"], sanity=True).sanity == ChemistryGate()
    assert MPO(sanity={"min_heavy_atoms": 1})("CO") > 0.0
    assert MPO(sanity={"allowed_elements": ["C", "N", "O", "Fe"], "allow_dative_bonds": True})(
        "CCOC(=O)C(C#N->[Fe])=Cc1ccc([N+](=O)[O-])o1") > 0.0
    assert MPO(sanity={"max_abs_formal_charge": 0}).rejection("O=[N+]([O-])c1ccc(Cl)cc1CC").startswith("formal")
    assert MPO().config()["sanity"]["min_heavy_atoms"] == 9
    for bad, message in [({"min_atoms": 3}, "unknown sanity gate argument"), ({"allowed_elements": ["Xx"]}, "not an "
                         "element"), ({"min_heavy_atoms": -1}, "non-negative"), ("yes", "sanity must be")]:
        with pytest.raises(ValueError, match=message):
            MPO(sanity=bad)


def test_rejected_molecules_cost_no_oracle_call() -> None:
    scorer = CachedScorer(MPO())
    assert scorer.score(["CO", "C[Og]C", PARACETAMOL, "OC", None]) == [0.0, 0.0, MPO()(PARACETAMOL), 0.0, 0.0]
    assert [call.smiles for call in scorer.history] == [Chem.CanonSmiles(PARACETAMOL)]
    assert set(scorer.rejected) == {"CO", Chem.CanonSmiles("C[Og]C")} and (scorer.hits, scorer.misses) == (0, 1)


def test_task_args_configure_the_gate() -> None:
    assert build_task("molecules", sanity=False).objective.sanity is None
    assert build_task("molecules", sanity={"min_heavy_atoms": 12}).objective.sanity.min_heavy_atoms == 12
    assert build_task("molecules").objective.sanity == ChemistryGate()


BASE_PROMPT = base_prompt(["CCOc1ccccc1", "CC(C)Cc1ccc(cc1)C(C)C(=O)O"])
CHAT_PROMPT = [{"role": "user", "content": "Propose one molecule. Answer with its SMILES string only."}]


@pytest.mark.parametrize(
    "completion, expected",
    [
        (" An = C(O) - C(N) or ...", None),  # prose after "SMILES:": no answer, whatever fragments it holds
        (" the molecule CC(=O)Nc1ccc(O)cc1", None),
        (f" {PARACETAMOL}\nSMILES: CCO", PARACETAMOL),  # the answer line; the invented next line is not read
        (f" {PARACETAMOL} is paracetamol", PARACETAMOL),
        (f" **{PARACETAMOL}**.", PARACETAMOL),
        (f"\n{PARACETAMOL}", PARACETAMOL),
        (" I", None),
    ],
)
def test_base_prompts_are_answered_on_the_first_line(completion: str, expected: str | None) -> None:
    clear_extraction_cache()
    expected = None if expected is None else Chem.CanonSmiles(expected)
    assert answer_smiles(completion, BASE_PROMPT) == expected
    task = MoleculeTask()
    assert task.outcome_key(completion, prompt=BASE_PROMPT) == expected
    (reward,) = task.reward_funcs()
    assert (reward(prompts=[BASE_PROMPT], completions=[completion])[0] > 0) == (expected is not None)


def test_chat_prompts_keep_the_general_rule() -> None:
    completion = f"Here is one: {PARACETAMOL}"
    assert answer_smiles(completion, CHAT_PROMPT) == extract_smiles(completion) == Chem.CanonSmiles(PARACETAMOL)
    assert answer_smiles(" An = C(O) - C(N) or ...", CHAT_PROMPT) == "CO"  # read, but the gate pays 0 for it
    (reward,) = MoleculeTask().reward_funcs()
    assert reward(prompts=[CHAT_PROMPT], completions=[" An = C(O) - C(N) or ..."]) == [0.0]


def test_evaluation_counts_the_base_models_fragments_as_no_answer() -> None:
    """The base samples of `divrl eval molecules` that scored 0.62-0.68 as CO / CN=O / C=O now score 0."""
    fragments = [" An = C(O) - C(N) or ...", " C=O is formaldehyde", " CN=O", f" {PARACETAMOL}"]
    metrics = evaluate_molecules(lambda prompts, n: [fragments[:n] for _ in prompts], 4, prompts=1)
    assert build_rows(1)[0]["prompt"].endswith("SMILES:")
    assert metrics["validity"] == pytest.approx(3 / 4)  # C=O and CN=O parse; the prose line is no answer
    assert metrics["sanity_rejected"] == pytest.approx(2 / 4) and metrics["sanity_rejections"] == {"too_small": 2}
    assert metrics["oracle_calls"] == 1 and metrics["reward"]["max"] == pytest.approx(MPO()(PARACETAMOL))
    assert metrics["config"]["objective"]["sanity"]["min_heavy_atoms"] == 9


def test_eval_cli_reports_and_can_switch_off_the_gate(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from divrl import sampling
    from divrl.cli import main

    class Ethanol:
        has_chat_template = False

        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def __call__(self, prompts: list, n: int = 1) -> list[list[str]]:
            return [[" CCO"] * n for _ in prompts]

    monkeypatch.setattr(sampling, "make_sampler", Ethanol)
    argv = ["eval", "molecules", "--model", "m", "--samples", "2", "--prompts", "1", "--out", str(tmp_path)]
    assert main(argv) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["validity"] == 1.0 and metrics["sanity_rejected"] == 1.0 and metrics["reward"]["max"] == 0.0
    assert main([*argv, "--no-sanity-gate"]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["sanity_rejected"] == 0.0 and metrics["reward"]["max"] > 0.7
    assert metrics["config"]["objective"]["sanity"] is None
