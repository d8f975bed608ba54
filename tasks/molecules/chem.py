"""Reading untrusted model output as molecules: SMILES extraction, parsing, canonicalisation.

Every function here accepts ANY string and returns `None` for what it cannot read; RDKit's
parse-error chatter is silenced for the duration of each call (`quiet_rdkit`).
Tokens longer than `MAX_SMILES_CHARS` are never handed to RDKit: parsing, QED and SA grow with size
(QED of a 100k-atom chain takes ~2 s) and real drug-like SMILES are far shorter (the longest in the
SMILES files shipped with RDKit has 291 characters).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from rdkit import Chem, rdBase

from divrl.task import completion_text

MAX_SMILES_CHARS = 400
MAX_SCANNED_CHARS = 20_000  # only this prefix of a completion is searched for a SMILES token
MAX_CANDIDATES = 64  # at most this many tokens are tried per completion

_FENCE = re.compile(r"```(.*?)```", re.S)
_SEPARATORS = re.compile(r"[\s,;<>`\"'|{}]+")
_SMILES_CHARS = re.compile(r"[A-Za-z0-9@+\-\[\]()=#$%/\\.:*~]+")


def quiet_rdkit() -> Any:
    """Context manager that silences RDKit's log (parse errors, sanitisation warnings) while it is open."""
    return rdBase.BlockLogs()


def parse_smiles(smiles: Any) -> Chem.Mol | None:
    """The RDKit molecule of `smiles`, or None when it is not a real molecule.

    Rejected: non-strings, empty or over-long strings, parse/sanitisation failures, molecules without
    heavy atoms (e.g. "[H][H]", or "" which RDKit parses as an empty molecule) and wildcard atoms ("*").
    """
    if not isinstance(smiles, str) or not smiles or len(smiles) > MAX_SMILES_CHARS:
        return None
    if _SMILES_CHARS.fullmatch(smiles) is None:
        return None
    try:
        with quiet_rdkit():
            mol = Chem.MolFromSmiles(smiles)
    except Exception:  # RDKit raises on a few pathological inputs instead of returning None
        return None
    if mol is None or mol.GetNumHeavyAtoms() == 0:
        return None
    if any(atom.GetAtomicNum() == 0 for atom in mol.GetAtoms()):
        return None
    return mol


def canonical_smiles(mol: Chem.Mol) -> str:
    """RDKit's canonical isomeric SMILES of a parsed molecule."""
    return Chem.MolToSmiles(mol)


def canonicalize(smiles: Any) -> str | None:
    """Canonical SMILES of `smiles`, or None when `parse_smiles` rejects it."""
    mol = parse_smiles(smiles)
    return None if mol is None else canonical_smiles(mol)


def _candidate_tokens(text: str) -> Iterator[str]:
    """Tokens that may be SMILES: code-fence contents first, then the whole text, with prose
    punctuation (markdown emphasis, trailing full stops/colons, wrapping parentheses) stripped."""
    text = text[:MAX_SCANNED_CHARS]
    for chunk in [*_FENCE.findall(text), text]:
        for token in _SEPARATORS.split(chunk):
            token = token.strip("*").rstrip(".:!?")
            if token.startswith("(") and token.count(")") >= token.count("("):
                token = token[1:-1] if token.endswith(")") else token[1:]
            if token and _SMILES_CHARS.fullmatch(token) is not None:
                yield token


def extract_smiles(completion: Any) -> str | None:
    """Canonical SMILES of the first plausible molecule in a completion (text or chat list), else None.

    Plausible = parses (see `parse_smiles`) and contains carbon: single-letter words such as "I" or "NO"
    parse as molecules too, and this task is about organic molecules.
    """
    text = completion_text(completion)
    for tried, token in enumerate(_candidate_tokens(text)):
        if tried >= MAX_CANDIDATES:
            break
        mol = parse_smiles(token)
        if mol is not None and any(atom.GetAtomicNum() == 6 for atom in mol.GetAtoms()):
            canonical = canonical_smiles(mol)
            if len(canonical) <= MAX_SMILES_CHARS:
                return canonical
    return None
