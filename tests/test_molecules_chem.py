"""SMILES extraction, parsing and canonicalisation on untrusted text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdkit import Chem

from divrl.tasks.molecules.chem import (
    MAX_SMILES_CHARS,
    canonicalize,
    extract_smiles,
    parse_smiles,
)
from divrl.tasks.molecules.rewards import MPO

ASPIRIN = Chem.MolToSmiles(Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O"))
CAFFEINE = Chem.MolToSmiles(Chem.MolFromSmiles("Cn1c(=O)c2c(ncn2C)n(C)c1=O"))


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("CC(=O)Oc1ccccc1C(=O)O", ASPIRIN),
        (" O=C(O)c1ccccc1OC(C)=O\nSMILES: CCO", ASPIRIN),  # base-model continuation: first line wins
        ("Sure! Here is a molecule: CC(=O)Oc1ccccc1C(=O)O.", ASPIRIN),  # trailing full stop
        ("```smiles\nCn1c(=O)c2c(ncn2C)n(C)c1=O\n```", CAFFEINE),
        ("I propose CCO, but ```\nCn1c(=O)c2c(ncn2C)n(C)c1=O\n``` is better", CAFFEINE),  # fence first
        ("My answer is **CC(=O)Oc1ccccc1C(=O)O**", ASPIRIN),  # markdown bold
        ('The SMILES is "CC(=O)Oc1ccccc1C(=O)O"', ASPIRIN),
        ("<smiles>CC(=O)Oc1ccccc1C(=O)O</smiles>", ASPIRIN),
        ("aspirin (CC(=O)Oc1ccccc1C(=O)O) is old", ASPIRIN),  # wrapping parentheses
        ("I think NO is not organic; CCO is", "CCO"),  # "I" and "NO" parse but hold no carbon
        ("SMILES: C1CC", None),  # unclosed ring
        ("no molecule here at all", None),
        ("", None),
        ("* ** [H][H]", None),  # wildcard atoms and hydrogen only
    ],
)
def test_extract_smiles_finds_first_plausible_molecule(completion: str, expected: str | None) -> None:
    assert extract_smiles(completion) == expected


def test_extract_smiles_reads_chat_completions() -> None:
    chat = [{"role": "assistant", "content": "Here: CC(=O)Oc1ccccc1C(=O)O"}]
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "Cn1c(=O)c2c(ncn2C)n(C)c1=O"}]}]
    assert extract_smiles(chat) == ASPIRIN
    assert extract_smiles(parts) == CAFFEINE


def test_canonicalize_agrees_with_rdkit_and_rejects_junk() -> None:
    assert canonicalize("OCC") == "CCO"
    assert canonicalize("c1ccccc1") == Chem.MolToSmiles(Chem.MolFromSmiles("C1=CC=CC=C1"))
    for junk in ["", "C1CC", "[H][H]", "*C", "Xx", None, 3.5, "C" * (MAX_SMILES_CHARS + 1)]:
        assert canonicalize(junk) is None, junk
    assert parse_smiles("C" * MAX_SMILES_CHARS) is not None


ADVERSARIAL = [
    "C" * 1_000_000,  # huge: never handed to RDKit, never scanned past MAX_SCANNED_CHARS
    "C1" * 5000,
    "(" * 10_000 + "C" + ")" * 10_000,
    "[" * 5000,
    "%99" * 2000,
    "C" + "(C" * 130 + ")" * 130,  # deep branching that still fits the length cap
    "C1" + "C" * 390 + "1",  # a 391-membered ring
    "\x00\x01\x02CCO\x00",
    "☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ﷽ CCO",
    "```" * 1000,
    "[CH5+7]",
    "[999U]",
    "c1cccc1",  # non-kekulisable aromatic ring
    "C=C=C=C=C=C=C=C",
    bytes(range(256)).decode("latin-1"),
]


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_inputs_never_raise(text: str) -> None:
    smiles = extract_smiles(text)
    assert smiles is None or canonicalize(smiles) == smiles
    assert 0.0 <= MPO()(text) <= 1.0


SMILES_ALPHABET = "CNOSPFIclnos()[]=#@+-123456789%/\\.*Hh "


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.text(alphabet=SMILES_ALPHABET, max_size=120), st.binary(max_size=200)))
def test_fuzz_extraction_and_reward_never_raise(raw: str | bytes) -> None:
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    smiles = extract_smiles(text)
    assert smiles is None or (parse_smiles(smiles) is not None and canonicalize(smiles) == smiles)
    assert 0.0 <= MPO()(text) <= 1.0
    assert 0.0 <= MPO()(smiles or "") <= 1.0


def test_rdkit_log_is_silenced_only_inside_our_calls(capfd: pytest.CaptureFixture[str]) -> None:
    assert extract_smiles("C1CC c1cccc1 [CH5] CCO") == "CCO"
    assert MPO()("C1CC") == 0.0
    assert "SMILES Parse Error" not in capfd.readouterr().err
    assert Chem.MolFromSmiles("C1CC") is None  # outside our calls RDKit's logging is as the user left it
    assert "SMILES Parse Error" in capfd.readouterr().err
