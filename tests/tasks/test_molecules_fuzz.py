"""Fuzz over real chemistry: mutated SMILES from the files shipped with RDKit never make scoring raise.

Mutations (insert, replace, delete a SMILES symbol) of real molecules produce the valid-but-odd molecules
that random text rarely does (hypervalent ring atoms, metals, charges), which is where RDKit's scaffold
code raises. Every entry point must still return numbers: scaffolds, the diversity filter in both
scaffold kinds, the filter-wrapped task reward, the cached scorer and the metrics.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdkit import rdBase
from rdkit.Chem.Scaffolds import MurckoScaffold

from divrl.tasks.molecules import DiversityFilter, MoleculeTask
from divrl.tasks.molecules.chem import canonicalize, extract_smiles, parse_smiles
from divrl.tasks.molecules.data import shipped_smiles
from divrl.tasks.molecules.diversity_filter import SCAFFOLD_KINDS, scaffold_of
from divrl.tasks.molecules.metrics import molecule_metrics
from divrl.tasks.molecules.rewards import MPO
from divrl.tasks.molecules.scoring import CachedScorer

SYMBOLS = [*"CNOSPFIcnos()[]=#123+-@", "Cl", "Br", "[S]", "[Fe]", "[N+]", "[O-]", "[Si]", "[P]", "%10"]
# Valid molecules whose generic scaffold RDKit cannot make (a carbon of valence > 4): a hypervalent ring
# sulphur, and metal complexes from the NCI file shipped with RDKit (one with a dative bond).
SCAFFOLD_BREAKERS = [
    "C1CC[S]2(CC1)(CC2)C",
    "C1C[NH][Ni]23([NH]1)([NH]CC[NH]2)[NH]CC[NH]3",
    "[C]12=[C]3[CH]4[C]5=[C]1[Fe]23541678[C]2=[C]1[CH]6[C]7=[C]28",
    "CN(C)C[C-]12->[Fe+2]3456789([C]%10=[C]3[C-]4[C]5=[C]%106)[C](=[C]17)[C]8=[C]29",
    "CC1=[O+][Mg]2([O+]=C(C)C1)[O+]=C(C)CC(C)=[O+]2",
]


def _generic_scaffold_raises(smiles: str) -> bool:
    """Whether RDKit's own generic-scaffold code raises on this molecule."""
    try:
        with rdBase.BlockLogs():
            MurckoScaffold.MakeScaffoldGeneric(MurckoScaffold.GetScaffoldForMol(parse_smiles(smiles)))
    except Exception:
        return True
    return False


def mutate(smiles: str, rng: random.Random, edits: int) -> str:
    """`smiles` with `edits` random symbol insertions, replacements or deletions."""
    chars = list(smiles)
    for _ in range(edits):
        at = rng.randrange(len(chars) + 1)
        operation = rng.choice(("insert", "replace", "delete"))
        if operation == "insert" or not chars:
            chars.insert(at, rng.choice(SYMBOLS))
        elif operation == "replace":
            chars[min(at, len(chars) - 1)] = rng.choice(SYMBOLS)
        else:
            del chars[min(at, len(chars) - 1)]
    return "".join(chars)


def _pool() -> list[str]:
    """Shipped molecules: the NCI set (metal complexes among them) and a slice of ChEMBL."""
    return [*shipped_smiles("nci"), *shipped_smiles("chembl")[:300]]


def _mutants(count: int, seed: int) -> list[str]:
    """`count` mutants (one or two edits) of seeded draws from the shipped molecules."""
    rng = random.Random(seed)
    pool = _pool()
    return [mutate(rng.choice(pool), rng, rng.randint(1, 2)) for _ in range(count)]


def check_everything_scores(smiles: list[str]) -> None:
    """Scaffolds, both filters, the wrapped reward, the scorer and the metrics on `smiles`: numbers in [0, 1]."""
    for s in smiles:
        mol = parse_smiles(s)
        if mol is not None:
            assert all(isinstance(scaffold_of(mol, kind), str) for kind in SCAFFOLD_KINDS)
        canonical = canonicalize(s)
        assert canonical is None or canonicalize(canonical) == canonical
    for kind in SCAFFOLD_KINDS:
        filtered = DiversityFilter(kind, bucket_size=2, min_score=0.0)(smiles, [0.9] * len(smiles))
        assert all(value in (0.0, 0.9) for value in filtered)
        task = MoleculeTask(diversity_filter={"scaffold": kind, "bucket_size": 2, "min_score": 0.0})
        (reward,) = task.reward_funcs()
        completions = [*smiles, *(f"Here is my proposal: {s}" for s in smiles)]
        rewards = reward(prompts=["p"] * len(completions), completions=completions)
        assert len(rewards) == len(completions)
        assert all(isinstance(r, float) and math.isfinite(r) and 0.0 <= r <= 1.0 for r in rewards)
    scorer = CachedScorer(MPO())
    extracted = [extract_smiles(s) for s in smiles]
    scores = scorer.score(extracted)
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in scores)
    assert all(canonicalize(call.smiles) == call.smiles for call in scorer.history)
    metrics = molecule_metrics(extracted, scores, scorer.history, _pool()[:50], taus=(0.5,), ob_n=1, budget=5)
    assert 0.0 <= metrics["validity"] <= 1.0 and 0.0 <= metrics["sample_uniqueness"] <= metrics["uniqueness"] <= 1.0


@pytest.mark.parametrize("smiles", SCAFFOLD_BREAKERS)
def test_generic_scaffold_falls_back_to_murcko_where_rdkit_raises(smiles: str) -> None:
    mol = parse_smiles(smiles)
    assert mol is not None and _generic_scaffold_raises(smiles)  # RDKit itself raises here
    assert scaffold_of(mol, "generic") == scaffold_of(mol, "murcko") != ""
    assert DiversityFilter("generic")([smiles], [0.9]) == [0.9]


def test_scaffold_breakers_score_everywhere() -> None:
    check_everything_scores(SCAFFOLD_BREAKERS)


def test_seeded_mutants_of_shipped_molecules() -> None:
    mutants = _mutants(400, seed=0)
    assert sum(parse_smiles(s) is not None for s in mutants) >= 40  # many are real molecules, not parse errors
    check_everything_scores(mutants)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 4)), min_size=1, max_size=6))
def test_fuzz_mutants_never_raise(draws: list[tuple[int, int]]) -> None:
    pool = _pool()
    check_everything_scores([mutate(pool[i % len(pool)], random.Random(i), edits) for i, edits in draws])


@pytest.mark.parametrize("text", ["", "no molecule", "C" * 500, "[Fe]", "CCO->CCN", "*"])
def test_odd_strings_score_zero_or_a_number(text: str) -> None:
    check_everything_scores([text])
