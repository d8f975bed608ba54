"""Reading untrusted model output as molecules: SMILES extraction, parsing, canonicalisation.

Every function here accepts ANY string and returns `None` for what it cannot read; RDKit's
parse-error chatter is silenced for the duration of each call (`quiet_rdkit`).
Tokens longer than `MAX_SMILES_CHARS` are never handed to RDKit: parsing, QED and SA grow with size
(QED of a 100k-atom chain takes ~2 s) and real drug-like SMILES are far shorter (the longest in the
SMILES files shipped with RDKit has 291 characters).

Extraction rule (`extract_smiles`), applied to the completion's answer text (reasoning inside
`<think>...</think>` removed, then the first `MAX_SCANNED_CHARS` characters):
1. Labelled tokens win, first one first: the token right after a "SMILES:" label (any case, markdown
   emphasis allowed, "SMILES string:" and "SMILES =" too, no space needed), and the completion's first
   line when it is a single token (a base model continuing a prompt that ends in "SMILES:").
2. Otherwise tokens inside ``` code fences, then the rest of the text; within each, tokens that look
   like SMILES come first: structural characters (ring digits, bonds, brackets, branches, charges)
   before plain multi-atom words (e.g. "CCO", but also the acronym "CNS") before single atoms (e.g. the
   "C" of "vitamin C"); ties go to the earlier token.
A token is read as is and, failing that, with its prose wrapping removed (markdown emphasis, trailing
punctuation, a "label:" prefix, wrapping brackets or unbalanced parentheses). The first candidate in
this order that parses and contains carbon is the answer.
Where the prompt itself asks for the answer (`answer_smiles`: a plain-text prompt ending in "SMILES:", as
the base few-shot prompts do) only the first token of the completion's first line is read
(`extract_smiles(..., first_line=True)`): the completion continues the label, and a base model writing
prose there (" An = C(O) - C(N) or ...") has not answered, whatever fragments its prose contains. Time is
bounded and linear in the text's length: tokens whose letters are not SMILES atoms (ordinary prose words) are
rejected without RDKit, a labelled token is read at most `MAX_SMILES_CHARS` + 9 characters far (a longer one is
not a SMILES, so `SMILES:SMILES:...` costs no more per label than a short answer), and at most `MAX_CANDIDATES` distinct
strings are handed to RDKit per completion.

Extraction is memoised by completion text (an LRU of `EXTRACTION_CACHE_SIZE` texts): the reward, the
diversity filter and the IPS/QD hooks all read the same completions in one training step, and each
completion is extracted once per step for batches of up to that many completions.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from rdkit import Chem, rdBase

from divrl.task import completion_text

MAX_SMILES_CHARS = 400
MAX_SCANNED_CHARS = 20_000  # only this prefix of the answer text is searched for a SMILES token
MAX_CANDIDATES = 64  # at most this many distinct SMILES-shaped strings are handed to RDKit per completion
EXTRACTION_CACHE_SIZE = 4096  # completion texts whose extracted SMILES are memoised (see the module docstring)
CACHED_TEXT_CHARS = 2048  # longer completions are not memoised: 4096 cached texts stay under ~32 MB
_MAX_TOKEN_CHARS = MAX_SMILES_CHARS + 8  # a token this long can still be a SMILES in prose wrapping

# Outside brackets SMILES letters can only be organic-subset atoms; RDKit writes dative bonds as -> and <-.
_SMILES_SHAPE = re.compile(r"(?:\[[^\[\]]*\]|Cl|Br|[BCNOPSFIbcnops]|[0-9@+\-()=#$%/\\.:*~<>])+")
_ATOM = re.compile(r"\[[^\[\]]*\]|Cl|Br|[BCNOPSFIbcnops]")
_STRUCTURAL = re.compile(r"[0-9@+\-\[\]()=#$%/\\<>]")
# A token: a run of non-separator characters; < and > separate (tags such as <smiles>) except in -> and <-.
_TOKEN_UNIT = r"(?:->|<-|[^\s,;`\"'|{}<>])"
_TOKEN = re.compile(_TOKEN_UNIT + "+")
# The token after a label, read at most one character past the longest useful token (linear time: see above).
_BOUNDED_TOKEN = re.compile(_TOKEN_UNIT + f"{{1,{_MAX_TOKEN_CHARS + 1}}}")
_FENCE = re.compile(r"```(.*?)```", re.S)
_LABEL = re.compile(r"\bSMILES\b[*_ ]*(?:string[*_ ]*)?[:=][*_]*", re.I)
_LABEL_PREFIX = re.compile(r"^[A-Za-z_]+:")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
BASE_ANSWER_LABEL = "SMILES:"  # a plain-text prompt ending in this asks for the answer right after it


def quiet_rdkit() -> Any:
    """Context manager that silences RDKit's log (parse errors, sanitisation warnings) while it is open."""
    return rdBase.BlockLogs()


def parse_smiles(smiles: Any) -> Chem.Mol | None:
    """The RDKit molecule of `smiles`, or None when it is not a real molecule.

    Rejected: non-strings, empty or over-long strings, strings that cannot be SMILES (letters outside
    brackets that are not organic-subset atoms), parse/sanitisation failures, molecules without heavy
    atoms (e.g. "[H][H]", or "" which RDKit parses as an empty molecule) and wildcard atoms ("*").
    """
    if not isinstance(smiles, str) or not smiles or len(smiles) > MAX_SMILES_CHARS:
        return None
    if _SMILES_SHAPE.fullmatch(smiles) is None:
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


def canonical_smiles(mol: Chem.Mol) -> str | None:
    """RDKit's canonical isomeric SMILES of a parsed molecule, or None when it does not read back as itself.

    RDKit occasionally writes SMILES it cannot parse again (e.g. some odd aromatic systems); treating
    those molecules as invalid keeps `canonicalize` idempotent, so cache keys, IPS outcomes and metrics agree.
    """
    smiles = Chem.MolToSmiles(mol)
    again = parse_smiles(smiles)
    return smiles if again is not None and Chem.MolToSmiles(again) == smiles else None


def canonicalize(smiles: Any) -> str | None:
    """Canonical SMILES of `smiles`, or None when it is not a valid molecule; idempotent."""
    mol = parse_smiles(smiles)
    return None if mol is None else canonical_smiles(mol)


def _answer_text(text: str) -> str:
    """`text` without reasoning: <think> blocks, text before a </think> opened in the prompt, an unclosed tail."""
    close_at, open_at = text.find(_THINK_CLOSE), text.find(_THINK_OPEN)
    if close_at != -1 and (open_at == -1 or close_at < open_at):  # chat templates may open the block in the prompt
        text = text[close_at + len(_THINK_CLOSE) :]
    kept, start = [], 0
    while (open_at := text.find(_THINK_OPEN, start)) != -1:
        kept.append(text[start:open_at])
        close_at = text.find(_THINK_CLOSE, open_at)
        if close_at == -1:  # still reasoning when the completion ended: no answer after it
            return " ".join(kept)
        start = close_at + len(_THINK_CLOSE)
    kept.append(text[start:])
    return " ".join(kept)


def _unwrapped(token: str) -> str:
    """`token` without prose wrapping: emphasis, end punctuation, a "label:" prefix, brackets, stray parentheses."""
    token = _LABEL_PREFIX.sub("", token.rstrip(".,:!?").strip("*_").rstrip(".,:!?"))  # "**X**." and "**X.**"
    if len(token) >= 2 and token[0] + token[-1] in ("()", "[]"):
        token = token[1:-1]
    if token.startswith("(") and token.count("(") > token.count(")"):
        token = token[1:]
    if token.endswith(")") and token.count(")") > token.count("("):
        token = token[:-1]
    return token


def _tier(token: str) -> int:
    """How SMILES-like a token looks: 0 structural characters, 1 several atoms, 2 a single atom (e.g. "C", "I")."""
    if _STRUCTURAL.search(token):
        return 0
    return 1 if len(_ATOM.findall(token)) >= 2 else 2


def _ranked_candidates(text: str, first_line: bool = False) -> list[str]:
    """SMILES-shaped strings of `text` in the order of the extraction rule (module docstring), without repeats;
    with `first_line`, only the first token of the first line (and its unwrapped form)."""
    keyed: list[tuple[tuple[int, int, int, int], str]] = []

    def add(match: re.Match[str], group: int, offset: int = 0) -> None:
        token = match.group()
        if len(token) > _MAX_TOKEN_CHARS:  # room for wrapping punctuation only
            return
        for variant, form in enumerate(dict.fromkeys((token, _unwrapped(token)))):
            if form and len(form) <= MAX_SMILES_CHARS and _SMILES_SHAPE.fullmatch(form):
                keyed.append(((group, 0 if group == 0 else _tier(form), offset + match.start(), variant), form))

    head = text.lstrip().split("\n", 1)[0]
    first = _TOKEN.search(head)
    if first is not None and (first_line or _TOKEN.search(head, first.end()) is None):  # a lone token
        add(first, group=0, offset=len(text) - len(text.lstrip()))
    if first_line:
        return [form for _, form in keyed]
    for label in _LABEL.finditer(text):
        # Bounded: an unbounded search here reads to the end of a `SMILES:SMILES:...` run once per label.
        token = _BOUNDED_TOKEN.search(text, label.end())
        if token is not None:
            add(token, group=0)  # a token cut at the bound is longer than _MAX_TOKEN_CHARS: add() drops it
    for fence in _FENCE.finditer(text):
        for token in _TOKEN.finditer(fence.group(1)):
            add(token, group=1, offset=fence.start(1))
    for token in _TOKEN.finditer(text):
        add(token, group=2)
    keyed.sort(key=lambda item: item[0])
    return list(dict.fromkeys(form for _, form in keyed))


def extract_smiles(completion: Any, *, first_line: bool = False) -> str | None:
    """Canonical SMILES of the completion's molecule (text or chat list) by the module's extraction rule, else None.

    Plausible = parses (see `parse_smiles`), contains carbon (words such as "I" or "NO" parse as molecules
    too, and this task is about organic molecules) and has a canonical SMILES (see `canonical_smiles`).
    `first_line=True` reads only the first token of the first line (a completion continuing "SMILES:").
    Memoised by completion text (`EXTRACTION_CACHE_SIZE` most recent texts of at most `CACHED_TEXT_CHARS`
    characters, so the cache stays within tens of MB whatever a model writes; longer texts are read uncached).
    """
    text = completion_text(completion)
    if len(text) > CACHED_TEXT_CHARS:
        return _extract_text(text, bool(first_line))
    return _extract_cached(text, bool(first_line))


def answer_smiles(completion: Any, prompt: Any = None) -> str | None:
    """The molecule a completion gives where `prompt` asks for it: after a plain-text prompt ending in "SMILES:"
    (the base few-shot prompts) or an empty prompt (a chemical LM's, BOS alone) the first token of the completion's
    first line, otherwise (chat prompts, unknown prompts) by the general extraction rule."""
    asks_inline = isinstance(prompt, str) and (prompt.rstrip().endswith(BASE_ANSWER_LABEL) or prompt == "")
    return extract_smiles(completion, first_line=asks_inline)


@functools.lru_cache(maxsize=EXTRACTION_CACHE_SIZE)
def _extract_cached(text: str, first_line: bool = False) -> str | None:
    """`_extract_text`, memoised: reward, diversity filter and hooks of one step read the same completions."""
    return _extract_text(text, first_line)


def clear_extraction_cache() -> None:
    """Forget the memoised extractions (tests; extraction is a pure function of the text, so never needed)."""
    _extract_cached.cache_clear()


def _extract_text(text: str, first_line: bool = False) -> str | None:
    """The extraction rule on a completion's plain text (uncached)."""
    text = _answer_text(text)[:MAX_SCANNED_CHARS]
    for token in _ranked_candidates(text, first_line)[:MAX_CANDIDATES]:
        mol = parse_smiles(token)
        if mol is not None and any(atom.GetAtomicNum() == 6 for atom in mol.GetAtoms()):
            canonical = canonical_smiles(mol)
            if canonical is not None:
                return canonical
    return None
