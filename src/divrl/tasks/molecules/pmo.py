"""PMO's RDKit-only oracles (Gao et al. 2022, "Sample Efficiency Matters: A Benchmark for Practical Molecular
Optimization"): 20 of its 23 objectives, written from GuacaMol's goal-directed benchmarks (Brown et al. 2019) as TDC
(>= 0.3.7) scores them for PMO, and checked against both on reference molecules (tests/fixtures/pmo_reference.json).

Each oracle maps a SMILES to a score in [0, 1]; an invalid or empty SMILES scores 0 (PMO's and TDC's convention,
where GuacaMol gives -1), and so does anything RDKit cannot score. DRD2, GSK3B and JNK3 need trained models that are
downloaded at run time: they are named here and refused. The building blocks:
- fingerprints are count-based (Morgan radius 2 = ECFP4, radius 3 = ECFP6, feature Morgan = FCFP4, atom pairs up to
  distance 10 = AP) or the Gobbi 2D pharmacophore bits (PHCO), compared by Tanimoto;
- modifiers: clipped (x / upper, in [0, 1]), Gaussian, and the one-sided min / max Gaussians;
- isomer scores: a Gaussian (sigma 1) per element count of the formula and one (sigma 2) on the total atom count with
  hydrogens, combined by geometric mean;
- multi-property objectives: geometric means (the hops: arithmetic means).
One guard is divrl's own: the hops score a molecule of more than 50 heavy atoms 0 (`PHCO_MAX_HEAVY_ATOMS`).
PMO's headline metric over a run, AUC top-10, is `divrl.tasks.molecules.metrics.auc_top_k`.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from rdkit import Chem, DataStructs
from rdkit.Chem import QED, Descriptors, rdFingerprintGenerator, rdMolDescriptors

from divrl.tasks.molecules.chem import quiet_rdkit

Score = Callable[[Chem.Mol], float]
NEEDS_DOWNLOAD = ("drd2", "gsk3b", "jnk3")  # PMO oracles that need trained models downloaded at run time
# divrl's guard, not PMO's: the Gobbi pharmacophore fingerprint of the two hops grows steeply with size (1 s at 50
# heavy atoms, 11 s at 100, 35 s at 150 on one core of this project's machines), so an untrusted completion could stall
# the oracle; their target has 31 heavy atoms and PMO's ZINC molecules at most 38. Larger molecules score 0 there.
PHCO_MAX_HEAVY_ATOMS = 50

CELECOXIB = "CC1=CC=C(C=C1)C1=CC(=NN1C1=CC=C(C=C1)S(N)(=O)=O)C(F)(F)F"
TROGLITAZONE = "Cc1c(C)c2OC(C)(COc3ccc(CC4SC(=O)NC4=O)cc3)CCc2c(C)c1O"
THIOTHIXENE = "CN(C)S(=O)(=O)c1ccc2Sc3ccccc3C(=CCCN4CCN(C)CC4)c2c1"
ALBUTEROL = "CC(C)(C)NCC(O)c1ccc(O)c(CO)c1"
MESTRANOL = "COc1ccc2[C@H]3CC[C@@]4(C)[C@@H](CC[C@@]4(O)C#C)[C@@H]3CCc2c1"
CAMPHOR, MENTHOL = "CC1(C)C2CCC1(C)C(=O)C2", "CC(C)C1CCC(C)CC1O"
TADALAFIL = "O=C1N(CC(N2C1CC3=C(C2C4=CC5=C(OCO5)C=C4)NC6=C3C=CC=C6)=O)C"
SILDENAFIL = "CCCC1=NN(C2=C1N=C(NC2=O)C3=C(C=CC(=C3)S(=O)(=O)N4CCN(CC4)C)OCC)C"
OSIMERTINIB = "COc1cc(N(C)CCN(C)C)c(NC(=O)C=C)cc1Nc2nccc(n2)c3cn(C)c4ccccc34"
FEXOFENADINE = "CC(C)(C(=O)O)c1ccc(cc1)C(O)CCCN2CCC(CC2)C(O)(c3ccccc3)c4ccccc4"
RANOLAZINE = "COc1ccccc1OCC(O)CN2CCN(CC(=O)Nc3c(C)cccc3C)CC2"
PERINDOPRIL = "O=C(OCC)C(NC(C(=O)N1C(C(=O)O)CC2CCCCC12)C)CCC"
AMLODIPINE = "Clc1ccccc1C2C(=C(/N/C(=C2/C(=O)OCC)COCCN)C)\\C(=O)OC"
SITAGLIPTIN = "Fc1cc(c(F)cc1F)CC(N)CC(=O)N3Cc2nnc(n2CC3)C(F)(F)F"
ZALEPLON = "O=C(C)N(CC)C1=CC=CC(C2=CC=NC3=C(C=NN23)C#N)=C1"
SITAGLIPTIN_AS_VALSARTAN_TARGET = "NC(CC(=O)N1CCn2c(nnc2C(F)(F)F)C1)Cc1cc(F)c(F)cc1F"
HOP_START = "CCCOc1cc2ncnc(Nc3ccc4ncsc4c3)c2cc1S(=O)(=O)C(C)(C)C"
QUINAZOLINE_CORE = "[#7]-c1n[c;h1]nc2[c;h1]c(-[#8])[c;h0][c;h1]c12"


# ------------------------------------------------------------------------------------------------ building blocks
def _fingerprint(kind: str, mol: Chem.Mol) -> Any:
    """A count fingerprint (ECFP4, ECFP6, FCFP4, AP) or the Gobbi 2D pharmacophore bits (PHCO) of `mol`; a molecule
    over `PHCO_MAX_HEAVY_ATOMS` has no PHCO fingerprint (ValueError: the oracle scores it 0)."""
    if kind == "PHCO":
        from rdkit.Chem.Pharm2D import Generate, Gobbi_Pharm2D

        if mol.GetNumHeavyAtoms() > PHCO_MAX_HEAVY_ATOMS:
            raise ValueError(f"more than {PHCO_MAX_HEAVY_ATOMS} heavy atoms for the pharmacophore fingerprint")

        return Generate.Gen2DFingerprint(mol, Gobbi_Pharm2D.factory)
    return _generators()[kind].GetSparseCountFingerprint(mol)


@functools.cache
def _generators() -> dict[str, Any]:
    """The RDKit fingerprint generators, built once per process."""
    return {
        "ECFP4": rdFingerprintGenerator.GetMorganGenerator(radius=2),
        "ECFP6": rdFingerprintGenerator.GetMorganGenerator(radius=3),
        "FCFP4": rdFingerprintGenerator.GetMorganGenerator(
            radius=2, atomInvariantsGenerator=rdFingerprintGenerator.GetMorganFeatureAtomInvGen()),
        "AP": rdFingerprintGenerator.GetAtomPairGenerator(maxDistance=10),
    }


def similarity(target: str, kind: str) -> Score:
    """Tanimoto similarity of a molecule's `kind` fingerprint to the target molecule's."""
    reference = _fingerprint(kind, Chem.MolFromSmiles(target))
    return lambda mol: DataStructs.TanimotoSimilarity(_fingerprint(kind, mol), reference)


def clipped(upper: float) -> Callable[[float], float]:
    """x / upper clipped to [0, 1] (GuacaMol's ClippedScoreModifier with lower 0)."""
    return lambda x: min(1.0, max(0.0, x / upper))


def gaussian(mu: float, sigma: float) -> Callable[[float], float]:
    """exp(-((x - mu) / sigma)^2 / 2)."""
    return lambda x: math.exp(-0.5 * ((x - mu) / sigma) ** 2)


def min_gaussian(mu: float, sigma: float) -> Callable[[float], float]:
    """1 for x <= mu, the Gaussian above it ("at most mu")."""
    return lambda x: gaussian(mu, sigma)(max(x, mu))


def max_gaussian(mu: float, sigma: float) -> Callable[[float], float]:
    """1 for x >= mu, the Gaussian below it ("at least mu")."""
    return lambda x: gaussian(mu, sigma)(min(x, mu))


def smarts(pattern: str, inverse: bool = False) -> Score:
    """1 when `mol` has the substructure (0 with `inverse`), else 0 (1)."""
    query = Chem.MolFromSmarts(pattern)
    return lambda mol: float(mol.HasSubstructMatch(query) != inverse)


def modified(score: Score, modifier: Callable[[float], float]) -> Score:
    return lambda mol: modifier(score(mol))


def geometric_mean(*scores: Score) -> Score:
    """The geometric mean of the scores (0 when any is 0)."""
    def combined(mol: Chem.Mol) -> float:
        values = [score(mol) for score in scores]
        if min(values) <= 0.0:
            return 0.0
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return combined


def arithmetic_mean(*scores: Score) -> Score:
    return lambda mol: sum(score(mol) for score in scores) / len(scores)


def atom_count(element: str) -> Score:
    """Atoms of `element` in the molecule (hydrogens counted with implicit ones added)."""
    if element == "H":
        return lambda mol: float(sum(a.GetSymbol() == "H" for a in Chem.AddHs(mol).GetAtoms()))
    return lambda mol: float(sum(a.GetSymbol() == element for a in mol.GetAtoms()))


def isomer(formula: str) -> Score:
    """GuacaMol's isomer score: a Gaussian (sigma 1) on each element's count, one (sigma 2) on the total atom count
    with hydrogens (dummy atoms not counted, as TDC), combined by geometric mean."""
    counts = [(element, int(n) if n else 1) for element, n in re.findall(r"([A-Z][a-z]*)(\d*)", formula)]
    terms = [modified(atom_count(element), gaussian(n, 1.0)) for element, n in counts]
    total = sum(n for _, n in counts)
    terms.append(modified(lambda mol: float(sum(a.GetAtomicNum() > 0 for a in Chem.AddHs(mol).GetAtoms())),
                          gaussian(total, 2.0)))
    return geometric_mean(*terms)


def descriptor(function: Callable[[Chem.Mol], float]) -> Score:
    return lambda mol: float(function(mol))


LOGP, TPSA, BERTZ = descriptor(Descriptors.MolLogP), descriptor(Descriptors.TPSA), descriptor(Descriptors.BertzCT)


def _of(smiles: str, score: Score) -> float:
    """A descriptor of a target molecule, computed at build time (as GuacaMol and TDC compute it)."""
    return score(Chem.MolFromSmiles(smiles))


# ------------------------------------------------------------------------------------------------ the 20 oracles
def _build(name: str) -> Score:
    """The scoring function of PMO oracle `name` on a parsed molecule."""
    if name == "qed":
        return descriptor(QED.qed)
    rediscovery = {"celecoxib_rediscovery": CELECOXIB, "troglitazone_rediscovery": TROGLITAZONE,
                   "thiothixene_rediscovery": THIOTHIXENE}
    if name in rediscovery:
        return similarity(rediscovery[name], "ECFP4")
    if name == "albuterol_similarity":
        return modified(similarity(ALBUTEROL, "FCFP4"), clipped(0.75))
    if name == "mestranol_similarity":
        return modified(similarity(MESTRANOL, "AP"), clipped(0.75))
    if name == "isomers_c7h8n2o2":
        return isomer("C7H8N2O2")
    if name == "isomers_c9h10n2o2pf2cl":
        return isomer("C9H10N2O2PF2Cl")
    if name == "median1":
        return geometric_mean(similarity(CAMPHOR, "ECFP4"), similarity(MENTHOL, "ECFP4"))
    if name == "median2":
        return geometric_mean(similarity(TADALAFIL, "ECFP6"), similarity(SILDENAFIL, "ECFP6"))
    if name == "osimertinib_mpo":
        return geometric_mean(modified(similarity(OSIMERTINIB, "FCFP4"), clipped(0.8)),
                              modified(similarity(OSIMERTINIB, "ECFP6"), min_gaussian(0.85, 0.1)),
                              modified(TPSA, max_gaussian(100, 10)), modified(LOGP, min_gaussian(1, 1)))
    if name == "fexofenadine_mpo":
        return geometric_mean(modified(similarity(FEXOFENADINE, "AP"), clipped(0.8)),
                              modified(TPSA, max_gaussian(90, 10)), modified(LOGP, min_gaussian(4, 1)))
    if name == "ranolazine_mpo":
        return geometric_mean(modified(similarity(RANOLAZINE, "AP"), clipped(0.7)),
                              modified(LOGP, max_gaussian(7, 1)), modified(TPSA, max_gaussian(95, 20)),
                              modified(atom_count("F"), gaussian(1, 1.0)))
    if name == "perindopril_mpo":
        return geometric_mean(similarity(PERINDOPRIL, "ECFP4"),
                              modified(descriptor(rdMolDescriptors.CalcNumAromaticRings), gaussian(2, 0.5)))
    if name == "amlodipine_mpo":
        return geometric_mean(similarity(AMLODIPINE, "ECFP4"),
                              modified(descriptor(rdMolDescriptors.CalcNumRings), gaussian(3, 0.5)))
    if name == "sitagliptin_mpo":
        return geometric_mean(modified(similarity(SITAGLIPTIN, "ECFP4"), gaussian(0, 0.1)),
                              modified(LOGP, gaussian(_of(SITAGLIPTIN, LOGP), 0.2)),
                              modified(TPSA, gaussian(_of(SITAGLIPTIN, TPSA), 5)), isomer("C16H15F6N5O"))
    if name == "zaleplon_mpo":
        return geometric_mean(similarity(ZALEPLON, "ECFP4"), isomer("C19H17N3O2"))
    if name == "valsartan_smarts":
        target = SITAGLIPTIN_AS_VALSARTAN_TARGET
        return geometric_mean(smarts("CN(C=O)Cc1ccc(c2ccccc2)cc1"),
                              modified(LOGP, gaussian(_of(target, LOGP), 0.2)),
                              modified(TPSA, gaussian(_of(target, TPSA), 5)),
                              modified(BERTZ, gaussian(_of(target, BERTZ), 30)))
    if name == "deco_hop":
        return arithmetic_mean(modified(similarity(HOP_START, "PHCO"), clipped(0.85)),
                               smarts("CS([#6])(=O)=O", inverse=True),
                               smarts("[#7]-c1ccc2ncsc2c1", inverse=True), smarts(QUINAZOLINE_CORE))
    if name == "scaffold_hop":
        return arithmetic_mean(modified(similarity(HOP_START, "PHCO"), clipped(0.75)),
                               smarts("[#6]-[#6]-[#6]-[#8]-[#6]~[#6]~[#6]~[#6]~[#6]-[#7]-c1ccc2ncsc2c1"),
                               smarts(QUINAZOLINE_CORE, inverse=True))
    raise KeyError(name)


PMO_ORACLES = ("albuterol_similarity", "amlodipine_mpo", "celecoxib_rediscovery", "deco_hop", "fexofenadine_mpo",
               "isomers_c7h8n2o2", "isomers_c9h10n2o2pf2cl", "median1", "median2", "mestranol_similarity",
               "osimertinib_mpo", "perindopril_mpo", "qed", "ranolazine_mpo", "scaffold_hop", "sitagliptin_mpo",
               "thiothixene_rediscovery", "troglitazone_rediscovery", "valsartan_smarts", "zaleplon_mpo")


def check_oracle_name(name: str) -> None:
    """ValueError naming the problem unless `name` is one of divrl's PMO oracles."""
    if name in NEEDS_DOWNLOAD:
        raise ValueError(f"PMO oracle {name!r} needs a trained model downloaded at run time, which divrl does not do "
                         f"(offline); the RDKit-only oracles are: {', '.join(PMO_ORACLES)}")
    if name not in PMO_ORACLES:
        raise ValueError(f"unknown PMO oracle {name!r}; choose one of: {', '.join(PMO_ORACLES)}")


@functools.cache
def _scorer(name: str) -> Score:
    return _build(name)


class PMOOracle:
    """A PMO oracle as a molecule objective: `oracle(smiles) -> float` in [0, 1], 0 for an invalid or empty SMILES
    or one RDKit cannot score (model output is untrusted). Picklable (it holds only the name) for process pools."""

    def __init__(self, name: str) -> None:
        check_oracle_name(name)
        self.name = name

    def __call__(self, smiles: Any) -> float:
        if not isinstance(smiles, str) or not smiles.strip():
            return 0.0
        with quiet_rdkit():
            mol = Chem.MolFromSmiles(smiles)
            if mol is None:
                return 0.0
            try:
                value = _scorer(self.name)(mol)
            except (ValueError, RuntimeError, ArithmeticError):  # RDKit's failures on odd molecules: unscorable
                return 0.0
        return value if math.isfinite(value) else 0.0

    def config(self) -> dict[str, Any]:
        """What a checkpoint records of the objective (a resume refuses another)."""
        return {"objective": self.name}

    def __repr__(self) -> str:
        return f"PMOOracle({self.name!r})"
