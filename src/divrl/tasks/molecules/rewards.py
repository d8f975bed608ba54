"""Cheap molecule reward components and their geometric-mean MPO (the IPS paper, Eq. 11).

The IPS paper's drug-discovery reward is the equal-weight geometric mean of docking, QED, an H-bond
donor step constraint and synthesizability. Docking and retrosynthesis are expensive and not shipped:
the default MPO here is the geometric mean of QED, normalised SA score (a cheap synthesizability proxy)
and the HBD step; users plug expensive oracles back in as extra components (SMILES -> [0, 1]).
Molecules that fail the chemistry sanity gate (`divrl.tasks.molecules.sanity`: exotic elements, large
formal charges, dative bonds, radicals, fewer than 9 heavy atoms) score 0; the gate is on by default for
the drug-like components and configurable with `sanity`.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rdkit import Chem
from rdkit.Chem import QED, rdMolDescriptors

from divrl.tasks.molecules.chem import canonical_smiles, parse_smiles, quiet_rdkit
from divrl.tasks.molecules.sanity import ChemistryGate, make_gate

logger = logging.getLogger(__name__)

DEFAULT_COMPONENTS = ("qed", "sa", "hbd")


def validity(mol: Chem.Mol) -> float:
    """1 for every molecule that parsed (invalid strings never reach a component and score 0)."""
    return 1.0


def qed(mol: Chem.Mol) -> float:
    """RDKit's Quantitative Estimate of Drug-likeness, in [0, 1]."""
    return float(QED.qed(mol))


def normalised_sa(mol: Chem.Mol) -> float:
    """Synthetic accessibility mapped to [0, 1]: (10 - SA) / 9, so 1 = easiest (SA = 1), 0 = hardest."""
    from rdkit.Contrib.SA_Score import sascorer  # lazy: loads its fragment table on first use

    return min(1.0, max(0.0, (10.0 - sascorer.calculateScore(mol)) / 9.0))


@dataclass(frozen=True)
class HBDStep:
    """Step constraint on hydrogen-bond donors (the IPS paper, Eq. 13): 1 if HBD <= threshold else 0."""

    threshold: int = 3

    def __call__(self, mol: Chem.Mol) -> float:
        return 1.0 if rdMolDescriptors.CalcNumHBD(mol) <= self.threshold else 0.0


MolComponent = Callable[[Chem.Mol], float]
SmilesComponent = Callable[[str], float]


def builtin_components(hbd_threshold: int = 3) -> dict[str, MolComponent]:
    """The shipped components by name (validity, qed, sa, hbd)."""
    return {"validity": validity, "qed": qed, "sa": normalised_sa, "hbd": HBDStep(hbd_threshold)}


class MPO:
    """Weighted geometric mean of reward components: prod_i c_i ** (w_i / sum w), 0 for invalid SMILES.

    `components` names shipped components; `extra_components` maps new names to user callables
    SMILES -> [0, 1] (e.g. a docking or retrosynthesis oracle), which receive the canonical SMILES.
    `weights` defaults to equal weights (the IPS paper, Eq. 11). A component that raises or returns a value
    outside [0, 1] scores 0 for that molecule and is logged once per component (counted in `failures`).
    `sanity` is the chemistry gate (`divrl.tasks.molecules.sanity`): "auto" (default) applies the default
    `ChemistryGate` whenever qed, sa or hbd is a component; None/False turns it off; a `ChemistryGate` or a
    dict of its arguments configures it. Molecules the gate rejects score 0 (`rejection` says why).
    """

    def __init__(
        self,
        components: Sequence[str] = DEFAULT_COMPONENTS,
        extra_components: Mapping[str, SmilesComponent] | None = None,
        weights: Mapping[str, float] | None = None,
        hbd_threshold: int = 3,
        sanity: ChemistryGate | Mapping[str, Any] | bool | str | None = "auto",
    ) -> None:
        available = builtin_components(hbd_threshold)
        unknown = [name for name in components if name not in available]
        if unknown:
            raise ValueError(f"unknown MPO component(s) {unknown}; shipped components are {sorted(available)}")
        extra = dict(extra_components or {})
        clashes = sorted(set(extra) & set(available))
        if clashes:
            raise ValueError(f"extra component name(s) {clashes} clash with shipped components; rename them")
        not_callable = sorted(name for name, fn in extra.items() if not callable(fn))
        if not_callable:
            raise ValueError(f"extra component(s) {not_callable} must be callables SMILES -> [0, 1]")
        if isinstance(hbd_threshold, bool) or not isinstance(hbd_threshold, int) or hbd_threshold < 0:
            raise ValueError(f"hbd_threshold must be a non-negative integer, got {hbd_threshold!r}")
        self.hbd_threshold = hbd_threshold
        self.mol_components = {name: available[name] for name in dict.fromkeys(components)}
        self.smiles_components = extra
        self.names = (*self.mol_components, *self.smiles_components)
        if not self.names:
            raise ValueError("MPO needs at least one component")
        self.weights = self._normalised_weights(weights)
        self.sanity = make_gate(sanity, list(self.mol_components))
        self.failures: Counter[str] = Counter()

    def _normalised_weights(self, weights: Mapping[str, float] | None) -> dict[str, float]:
        """Weights summing to 1, equal by default; unknown names and negative or all-zero weights are errors."""
        if weights is None:
            return {name: 1.0 / len(self.names) for name in self.names}
        unknown = sorted(set(weights) - set(self.names))
        if unknown:
            raise ValueError(f"weights given for unknown component(s) {unknown}; components are {list(self.names)}")
        raw = {name: float(weights.get(name, 1.0)) for name in self.names}
        if any(not math.isfinite(w) or w < 0 for w in raw.values()) or sum(raw.values()) <= 0:
            raise ValueError(f"MPO weights must be finite, >= 0 and not all zero, got {raw}")
        total = sum(raw.values())
        return {name: w / total for name, w in raw.items()}

    def config(self) -> dict[str, Any]:
        """JSON-able description of what this MPO computes (extra components by name), to match checkpoints."""
        hbd_threshold = self.hbd_threshold if "hbd" in self.mol_components else None
        sanity = None if self.sanity is None else self.sanity.config()
        return {"components": list(self.names), "weights": dict(self.weights), "hbd_threshold": hbd_threshold,
                "sanity": sanity}

    def rejection(self, smiles: str) -> str | None:
        """Why the chemistry gate rejects `smiles` (a parsed molecule), or None: it passes, there is no gate, or
        it does not parse (invalid strings are not the gate's business: they score 0 anyway)."""
        if self.sanity is None:
            return None
        mol = parse_smiles(smiles)
        return None if mol is None else self.sanity.rejection(mol)

    def component_scores(self, smiles: str) -> dict[str, float] | None:
        """Each component's value in [0, 1] for `smiles`, or None when it is not a valid molecule or fails the gate."""
        mol = parse_smiles(smiles)
        if mol is None or (self.sanity is not None and self.sanity.rejection(mol) is not None):
            return None
        canonical = canonical_smiles(mol) if self.smiles_components else ""
        if canonical is None:  # RDKit cannot read its own SMILES of this molecule back: not valid
            return None
        scores = {}
        with quiet_rdkit():
            for name, component in self.mol_components.items():
                scores[name] = self._checked(name, component, mol, smiles)
        for name, component in self.smiles_components.items():
            scores[name] = self._checked(name, component, canonical, canonical)
        return scores

    def _checked(self, name: str, component: Callable, argument: object, smiles: str) -> float:
        """`component(argument)` if it is a number in [0, 1] (tiny float overshoot clipped), else 0 (logged)."""
        try:
            value = float(component(argument))
            if not -1e-9 <= value <= 1.0 + 1e-9:  # also catches NaN
                raise ValueError(f"returned {value}, outside [0, 1]")
            return min(1.0, max(0.0, value))
        except Exception as error:
            if not self.failures[name]:
                logger.warning("MPO component %r failed on %s (%s); scoring it 0", name, smiles, error)
            self.failures[name] += 1
            return 0.0

    def __call__(self, smiles: str) -> float:
        """The MPO reward of one SMILES string (any string: invalid ones score 0)."""
        scores = self.component_scores(smiles)
        if scores is None:
            return 0.0
        weighted = {name: value for name, value in scores.items() if self.weights[name] > 0}
        if any(value <= 0.0 for value in weighted.values()):
            return 0.0
        return math.exp(sum(self.weights[name] * math.log(value) for name, value in weighted.items()))
