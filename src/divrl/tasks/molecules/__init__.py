"""Molecule generation task: cheap RDKit rewards, a diversity filter and discovery metrics.

The names below load lazily (PEP 562) so that `divrl eval molecules --help` does not import RDKit.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "MoleculeTask": "task",
    "MoleculeReward": "task",
    "MPO": "rewards",
    "HBDStep": "rewards",
    "CachedScorer": "scoring",
    "OracleCall": "scoring",
    "DiversityFilter": "diversity_filter",
    "extract_smiles": "chem",
    "canonicalize": "chem",
    "parse_smiles": "chem",
    "build_dataset": "data",
    "reference_smiles": "data",
    "molecule_metrics": "metrics",
    "evaluate_molecules": "evaluate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Import the submodule that defines `name` on first access."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
