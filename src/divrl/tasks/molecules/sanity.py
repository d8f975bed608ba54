"""Chemistry sanity gate: molecules RDKit accepts but no drug-like reward should pay for.

RDKit parses and sanitises far more than drug chemistry: `[C+15]C[C-15]` (a carbon with charge +15),
`C[Og]C` (oganesson), `[Uuo]`, metal complexes written with dative bonds (`N->[Fe]`), radicals, and tiny
fragments such as methanol ("CO"), which a base model lifts from prose. QED and SA still score them
(0.46-0.68 in the cheap MPO), so RL can farm reward there. The gate rejects, in this order:

1. atoms of elements outside `allowed_elements` (default: H, B, C, N, O, F, P, S, Cl, Br, I; no metals,
   metalloids other than boron, noble gases or placeholder elements),
2. atoms whose formal charge exceeds `max_abs_formal_charge` in size (default 1: nitro groups,
   ammonium and carboxylate pass; `[C+15]`, `[N+2]` fail),
3. dative bonds (`->`, RDKit's notation for coordination to metals), unless `allow_dative_bonds`,
4. atoms with unpaired electrons (radicals, e.g. `C[CH]C`), unless `allow_radicals`,
5. molecules with fewer than `min_heavy_atoms` heavy atoms (default 9: the smallest few-shot example
   has 9, 99% of the shipped WEHI screening set has 12 or more; methanol has 2, benzene 6).

`rejection(mol)` names the first rule a molecule breaks as "KIND: detail" (KIND one of `REJECTION_KINDS`),
or returns None when it passes. The MPO applies
the gate by default (`MPO(sanity="auto")`: on whenever a drug-like component, qed, sa or hbd, is in
the mix): rejected molecules score 0, and `CachedScorer` scores them 0 without an oracle call.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rdkit import Chem

DRUG_LIKE_ELEMENTS = ("H", "B", "C", "N", "O", "F", "P", "S", "Cl", "Br", "I")
DRUG_LIKE_COMPONENTS = ("qed", "sa", "hbd")  # an MPO with any of these gets the gate by default
REJECTION_KINDS = ("element", "formal_charge", "dative_bond", "radical", "too_small")


@dataclass(frozen=True)
class ChemistryGate:
    """Which parsed molecules count as chemistry a drug-like reward may pay for (see the module docstring)."""

    allowed_elements: tuple[str, ...] = DRUG_LIKE_ELEMENTS
    max_abs_formal_charge: int = 1
    allow_dative_bonds: bool = False
    allow_radicals: bool = False
    min_heavy_atoms: int = 9
    _atomic_numbers: frozenset[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        elements = self.allowed_elements
        if isinstance(elements, str) or not isinstance(elements, Sequence) or not elements:
            raise ValueError(f"allowed_elements must be a non-empty list of element symbols, got {elements!r}")
        table = Chem.GetPeriodicTable()
        numbers_ = set()
        for symbol in elements:
            try:
                number = table.GetAtomicNumber(symbol) if isinstance(symbol, str) and symbol != "*" else 0
            except RuntimeError:  # RDKit raises on unknown symbols
                number = 0
            if number < 1:
                raise ValueError(f"allowed_elements: {symbol!r} is not an element symbol (e.g. 'C', 'Cl')")
            numbers_.add(number)
        object.__setattr__(self, "allowed_elements", tuple(elements))
        object.__setattr__(self, "_atomic_numbers", frozenset(numbers_))
        for name in ("max_abs_formal_charge", "min_heavy_atoms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        for name in ("allow_dative_bonds", "allow_radicals"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")

    def rejection(self, mol: Chem.Mol) -> str | None:
        """Why `mol` fails the gate (the first rule it breaks), or None when it passes."""
        for atom in mol.GetAtoms():
            if atom.GetAtomicNum() not in self._atomic_numbers:
                return f"element: {atom.GetSymbol()} is not among the allowed elements"
            charge = atom.GetFormalCharge()
            if abs(charge) > self.max_abs_formal_charge:
                return f"formal_charge: {charge:+d} on {atom.GetSymbol()} exceeds +/-{self.max_abs_formal_charge}"
        if not self.allow_dative_bonds and any(b.GetBondType() == Chem.BondType.DATIVE for b in mol.GetBonds()):
            return "dative_bond: coordination bond (->)"
        if not self.allow_radicals and any(atom.GetNumRadicalElectrons() for atom in mol.GetAtoms()):
            return "radical: unpaired electrons"
        heavy = mol.GetNumHeavyAtoms()
        if heavy < self.min_heavy_atoms:
            return f"too_small: {heavy} heavy atoms, fewer than the minimum {self.min_heavy_atoms}"
        return None

    def config(self) -> dict[str, Any]:
        """JSON-able parameters (part of the MPO's config, so checkpoints match)."""
        config = asdict(self)
        config.pop("_atomic_numbers", None)
        config["allowed_elements"] = list(self.allowed_elements)
        return config


def make_gate(spec: Any, components: Sequence[str]) -> ChemistryGate | None:
    """The MPO's gate from its `sanity` argument: "auto" (on iff a drug-like component is used), True/False,
    None (off), a `ChemistryGate`, or a mapping of `ChemistryGate` arguments (recipes' task_args give a dict)."""
    if isinstance(spec, ChemistryGate):
        return spec
    if spec == "auto":
        return ChemistryGate() if any(name in DRUG_LIKE_COMPONENTS for name in components) else None
    if spec is None or spec is False:
        return None
    if spec is True:
        return ChemistryGate()
    if isinstance(spec, Mapping):
        accepted = {"allowed_elements", "max_abs_formal_charge", "allow_dative_bonds", "allow_radicals",
                    "min_heavy_atoms"}
        unknown = sorted(set(spec) - accepted)
        if unknown:
            raise ValueError(f"unknown sanity gate argument(s) {unknown}; accepted: {sorted(accepted)}")
        arguments = dict(spec)
        if isinstance(arguments.get("allowed_elements"), list):
            arguments["allowed_elements"] = tuple(arguments["allowed_elements"])
        return ChemistryGate(**arguments)
    raise ValueError(f"sanity must be 'auto', true, false, null, a ChemistryGate or a mapping of its arguments, "
                     f"got {spec!r}")
