"""SMILES extraction, parsing and canonicalisation on untrusted text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdkit import Chem

from divrl.tasks.molecules import chem
from divrl.tasks.molecules.chem import (
    MAX_CANDIDATES,
    MAX_SMILES_CHARS,
    canonicalize,
    extract_smiles,
    parse_smiles,
)
from divrl.tasks.molecules.rewards import MPO
from divrl.tasks.molecules.scoring import CachedScorer

ASPIRIN = Chem.MolToSmiles(Chem.MolFromSmiles("CC(=O)Oc1ccccc1C(=O)O"))
CAFFEINE = Chem.MolToSmiles(Chem.MolFromSmiles("Cn1c(=O)c2c(ncn2C)n(C)c1=O"))
PARACETAMOL = Chem.MolToSmiles(Chem.MolFromSmiles("CC(=O)Nc1ccc(O)cc1"))
ACETIC_ACID = "CC(=O)O"
EXPLANATION = " ".join(
    ["I considered solubility, the number of hydrogen-bond donors and how easy it is to make it."] * 12
)  # 204 prose words, "I" among them (iodine: parses, no carbon)


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


@pytest.mark.parametrize(
    "completion, expected",
    [
        (f"{EXPLANATION}\nHere is my proposal: CC(=O)Nc1ccc(O)cc1", PARACETAMOL),  # long prose first
        (f"{EXPLANATION} on no so In Is NO. Answer: CCO", "CCO"),  # SMILES-shaped words without carbon
        ("Vitamin C analogue: CC(=O)Oc1ccccc1C(=O)O", ASPIRIN),  # structure beats the single atom "C"
        ("Here is a CNS drug: CC(=O)Oc1ccccc1C(=O)O", ASPIRIN),  # ... and the plain-letter acronym "CNS"
        ("Vitamin C analogue: CCO", "CCO"),  # several atoms beat one
        ("Here is a CNS drug: CCO", "CNS"),  # two plain-letter words: the first one (a documented ambiguity)
        ("<think>maybe CCC</think> CCO", "CCO"),  # reasoning is skipped
        ("<think>maybe CCC, or c1ccccc1</think>\n\nFinal: CCO", "CCO"),
        ("maybe CCC</think>\nCCO", "CCO"),  # the <think> was opened by the chat template, in the prompt
        ("<think>maybe CCC", None),  # still reasoning when the completion ended: no answer
        ("SMILES:CC(=O)O", ACETIC_ACID),  # label without a space
        ("[CC(=O)O]", ACETIC_ACID),  # wrapping brackets
        ("`CC(=O)O`", ACETIC_ACID),
        ("'CC(=O)O'.", ACETIC_ACID),
        ("Answer:CC(=O)O", ACETIC_ACID),
        ("(see CC(=O)O)", ACETIC_ACID),
        ("[Na+].[Cl-] is salt; CCO is not", "CCO"),  # a bracketed SMILES is read as is first
        ("**SMILES:** `CCO` (ethanol, unlike c1ccccc1)", "CCO"),  # a labelled token beats better-looking ones
        ("smiles string = CCO, or c1ccccc1", "CCO"),
        ("Ethanol is a classic. SMILES: CCO\nSMILES: CCN", "CCO"),  # first label wins
        (" CCO\nSMILES: c1ccccc1", "CCO"),  # base continuation: a lone first line counts as labelled
        ("Ethanol CCO or benzene c1ccccc1", "c1ccccc1"),  # unlabelled: structural characters first
        ("SMILES: C1CC (oops) CCO", "CCO"),  # an unreadable labelled token falls back to the rest
    ],
)
def test_extraction_rule(completion: str, expected: str | None) -> None:
    assert extract_smiles(completion) == expected


def test_extraction_hands_rdkit_a_bounded_number_of_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    original = Chem.MolFromSmiles
    monkeypatch.setattr(chem.Chem, "MolFromSmiles", lambda s, *a: parsed.append(s) or original(s, *a))
    assert extract_smiles(" ".join(f"C{i}" for i in range(10_000))) is None  # 10,000 distinct unclosed rings
    assert len(parsed) == MAX_CANDIDATES
    parsed.clear()
    prose = " ".join(["the quick brown fox jumps over the lazy dog"] * 400)  # 3,600 words, none SMILES-shaped
    assert extract_smiles(f"{prose} so I propose CC(=O)Nc1ccc(O)cc1") == PARACETAMOL
    assert len(parsed) == 2  # the molecule, and its canonical SMILES read back


DATIVE = "CCOC(=O)C(C#N[Fe])=Cc1ccc([N+](=O)[O-])o1"  # RDKit writes the N-Fe bond as a dative "->"


def test_canonicalisation_is_idempotent_with_dative_bonds() -> None:
    canonical = canonicalize(DATIVE)
    assert canonical is not None and "->" in canonical
    assert canonicalize(canonical) == canonical and parse_smiles(canonical) is not None
    assert extract_smiles(f"SMILES: {canonical}") == extract_smiles(DATIVE) == canonical
    scorer = CachedScorer(MPO(sanity=None))  # the default chemistry gate rejects dative bonds (and iron)
    assert scorer.score([DATIVE, canonical])[0] > 0 and [call.smiles for call in scorer.history] == [canonical]


def test_molecules_rdkit_cannot_read_back_are_invalid_everywhere() -> None:
    """RDKit writes this odd aromatic system as a SMILES it cannot parse: canonicalize says None, consistently."""
    odd = "Cc1nc2c(=oc3cc(Br)cc32)c(=O)1"
    assert Chem.MolFromSmiles(odd) is not None
    canonical = canonicalize(odd)
    assert canonical is None or canonicalize(canonical) == canonical
    assert extract_smiles(odd) == canonical
    assert CachedScorer(MPO()).score([odd]) == [0.0 if canonical is None else MPO()(canonical)]


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


def test_long_completions_are_read_but_not_memoised() -> None:
    from divrl.tasks.molecules.chem import CACHED_TEXT_CHARS, _extract_cached, clear_extraction_cache

    clear_extraction_cache()
    long_text = "CCO " + "x" * (CACHED_TEXT_CHARS + 1)  # a 1 MB completion must not sit in the cache
    assert extract_smiles(long_text) == "CCO"
    assert _extract_cached.cache_info().currsize == 0
    assert extract_smiles("CCO") == "CCO" and _extract_cached.cache_info().currsize == 1
