"""Offline molecule data and prompts: SMILES files shipped inside the rdkit wheel, few-shot prompts
for base (plain text) and instruct (chat) models, and a deterministic novelty reference set."""

from __future__ import annotations

import csv
import functools
import random
from pathlib import Path
from typing import Any

from divrl.tasks.molecules.chem import canonicalize

# name -> path inside the installed rdkit package
SHIPPED_SMILES = {
    "nci": "Data/NCI/first_5K.smi",  # NCI first 5K (tab-separated SMILES, id)
    "wehi": "Data/Pains/test_data/wehi_mols.csv",  # 10,000 WEHI screening molecules ("SMILES","id")
    "chembl": "Contrib/FreeWilson/data/CHEMBL2321810.smi",  # ~1,000 ChEMBL molecules (SMILES id)
}
FEW_SHOT_SOURCE = "wehi"  # diverse, drug-like screening compounds
FEW_SHOT_CHARS = (20, 60)  # few-shot examples of moderate length keep prompts short
# plain-text few-shot for base models, chat messages for instruct models, an empty prompt for a chemical LM (whose
# tokenizer turns it into BOS alone: `embedded:smiles-clm`)
STYLES = ("base", "chat", "clm")
CLM_PROMPT = ""

BASE_HEADER = "Drug-like molecules written as SMILES strings, one per line.\n"
INSTRUCT_SYSTEM = "You are an expert medicinal chemist who writes molecules as SMILES strings."
INSTRUCT_REQUEST = (
    "Here are some drug-like molecules as SMILES:\n{examples}\n"
    "Propose one new drug-like molecule. Answer with its SMILES string only."
)


def _rdkit_dir() -> Path:
    """The installed rdkit package directory."""
    import rdkit

    return Path(rdkit.__file__).parent


@functools.cache
def shipped_smiles(source: str) -> tuple[str, ...]:
    """Distinct canonical SMILES of one shipped file (`nci`, `wehi` or `chembl`), in file order."""
    if source not in SHIPPED_SMILES:
        raise ValueError(f"unknown SMILES source {source!r}; choose from {sorted(SHIPPED_SMILES)}")
    path = _rdkit_dir() / SHIPPED_SMILES[source]
    if not path.is_file():
        raise ValueError(f"the installed rdkit lacks {path} (source {source!r}); reinstall the rdkit wheel")
    with path.open(newline="") as handle:
        if path.suffix == ".csv":
            raw = [row[0] for row in csv.reader(handle) if row]
        else:
            raw = [line.split()[0] for line in handle if line.strip()]
    return tuple(dict.fromkeys(s for s in map(canonicalize, raw) if s is not None))


def reference_smiles(
    size: int | None = None, seed: int = 0, sources: tuple[str, ...] = tuple(SHIPPED_SMILES)
) -> list[str]:
    """Novelty reference set: the distinct canonical SMILES of `sources`, or a seeded sample of `size` (sorted)."""
    pool = sorted({s for source in sources for s in shipped_smiles(source)})
    if size is None:
        return pool
    if not 0 < size <= len(pool):
        raise ValueError(f"reference size must be in [1, {len(pool)}], got {size}")
    return sorted(random.Random(seed).sample(pool, size))


def few_shot_pool() -> list[str]:
    """Candidate few-shot examples: shipped WEHI molecules of moderate SMILES length."""
    low, high = FEW_SHOT_CHARS
    return [s for s in shipped_smiles(FEW_SHOT_SOURCE) if low <= len(s) <= high]


def sft_targets() -> list[str]:
    """Warm-start targets: the distinct canonical SMILES of every shipped file that pass the default chemistry
    sanity gate and are never a few-shot example (not in `few_shot_pool`), sorted; so no prompt of any seed shows
    a molecule that supervised training taught."""
    from divrl.tasks.molecules.chem import parse_smiles
    from divrl.tasks.molecules.sanity import ChemistryGate

    gate = ChemistryGate()
    pool = {s for source in SHIPPED_SMILES for s in shipped_smiles(source)} - set(few_shot_pool())
    return sorted(s for s in pool if gate.rejection(parse_smiles(s)) is None)


def base_prompt(examples: list[str]) -> str:
    """Plain-text few-shot prompt for a base model; the completion continues after the last "SMILES:"."""
    return BASE_HEADER + "".join(f"SMILES: {s}\n" for s in examples) + "SMILES:"


def chat_prompt(examples: list[str]) -> list[dict[str, str]]:
    """Chat prompt for an instruct model, listing `examples` and asking for one new molecule."""
    listed = "\n".join(f"- {s}" for s in examples)
    return [
        {"role": "system", "content": INSTRUCT_SYSTEM},
        {"role": "user", "content": INSTRUCT_REQUEST.format(examples=listed)},
    ]


def build_rows(n_prompts: int, style: str = "base", n_shots: int = 3, seed: int = 0) -> list[dict[str, Any]]:
    """`n_prompts` rows {"prompt", "few_shot"}, each with its own seeded draw of `n_shots` examples; with style
    "clm" every prompt is empty and shows no example (a chemical LM writes a SMILES from BOS alone)."""
    if style not in STYLES:
        raise ValueError(f"prompt style must be one of {STYLES}, got {style!r}")
    if n_prompts < 1 or n_shots < 0:
        raise ValueError(f"need n_prompts >= 1 and n_shots >= 0, got n_prompts={n_prompts}, n_shots={n_shots}")
    if style == "clm":
        return [{"prompt": CLM_PROMPT, "few_shot": []} for _ in range(n_prompts)]
    pool = few_shot_pool()
    if n_shots > len(pool):
        raise ValueError(f"n_shots={n_shots} exceeds the {len(pool)} available few-shot examples")
    rng = random.Random(seed)
    make_prompt = base_prompt if style == "base" else chat_prompt
    rows = []
    for _ in range(n_prompts):
        examples = rng.sample(pool, n_shots)
        rows.append({"prompt": make_prompt(examples), "few_shot": examples})
    return rows


def build_dataset(n_prompts: int, style: str = "base", n_shots: int = 3, seed: int = 0) -> Any:
    """A `datasets.Dataset` of `build_rows` for GRPO training (column "prompt", plus "few_shot")."""
    from datasets import Dataset

    return Dataset.from_list(build_rows(n_prompts, style=style, n_shots=n_shots, seed=seed))
