"""REINVENT/Saturn-style diversity filter: scaffold buckets that zero the reward of crowded scaffolds.

Semantics of REINVENT's IdenticalMurckoScaffold filter (the one Saturn and the IPS paper use with bucket
size 10): a molecule already memorised scores `repeat_penalty` x its score (0 by default); otherwise
a molecule scoring >= `min_score` is memorised in its scaffold's bucket, and once the bucket holds
more than `bucket_size` molecules, it scores 0. Scaffolds are Bemis-Murcko ("murcko") or their
generic, all-carbon single-bond form ("generic"); acyclic molecules share the empty scaffold "".
Scaffold computation never raises: when RDKit cannot make a scaffold generic (e.g. a hypervalent
ring sulphur becomes a carbon with valence 6), the molecule falls back to its Murcko scaffold, and when
that fails too, to its own canonical SMILES.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

from rdkit import Chem
from rdkit.Chem.Scaffolds import MurckoScaffold

from divrl.tasks.molecules.chem import canonical_smiles, extract_smiles, parse_smiles, quiet_rdkit


def _extract_ignoring_prompt(completion: Any, prompt: Any = None) -> str | None:
    """The default reader of a filtered reward: the general extraction rule, whatever the prompt."""
    return extract_smiles(completion)


def _murcko(mol: Chem.Mol) -> Chem.Mol:
    """Bemis-Murcko scaffold of a molecule."""
    return MurckoScaffold.GetScaffoldForMol(mol)


def _generic(mol: Chem.Mol) -> Chem.Mol:
    """Generic (all-carbon, single-bond) Bemis-Murcko scaffold of a molecule."""
    return MurckoScaffold.MakeScaffoldGeneric(MurckoScaffold.GetScaffoldForMol(mol))


_SCAFFOLD_STEPS = {"murcko": (_murcko,), "generic": (_generic, _murcko)}  # tried in order
SCAFFOLD_KINDS = tuple(_SCAFFOLD_STEPS)


def scaffold_of(mol: Chem.Mol, kind: str = "murcko") -> str:
    """Scaffold SMILES (non-isomeric) of a molecule, `kind` "murcko" or "generic"; never raises (see module doc)."""
    with quiet_rdkit():
        for step in _SCAFFOLD_STEPS[kind]:
            try:
                return Chem.MolToSmiles(step(mol), isomericSmiles=False)
            except Exception:  # RDKit sanitisation of a rewritten scaffold can fail on valid molecules
                continue
        return Chem.MolToSmiles(mol, isomericSmiles=False)


def _is_real(value: Any) -> bool:
    """Whether `value` is a real number (bools and numeric strings are not)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


class DiversityFilter:
    """Scaffold-bucket diversity filter; call it on (SMILES, scores) or `wrap` a TRL reward function."""

    def __init__(
        self, scaffold: str = "murcko", bucket_size: int = 10, min_score: float = 0.4, repeat_penalty: float = 0.0
    ) -> None:
        if scaffold not in SCAFFOLD_KINDS:
            raise ValueError(f"scaffold must be one of {SCAFFOLD_KINDS}, got {scaffold!r}")
        if isinstance(bucket_size, bool) or not isinstance(bucket_size, numbers.Integral) or bucket_size < 1:
            raise ValueError(f"bucket_size must be a positive integer, got {bucket_size!r}")
        if not _is_real(min_score) or not math.isfinite(min_score):
            raise ValueError(f"min_score must be a finite number, got {min_score!r}")
        if not _is_real(repeat_penalty) or not 0.0 <= repeat_penalty <= 1.0:
            raise ValueError(f"repeat_penalty must be a multiplier in [0, 1], got {repeat_penalty!r}")
        self.scaffold = scaffold
        self.bucket_size = int(bucket_size)
        self.min_score = float(min_score)
        self.repeat_penalty = float(repeat_penalty)
        self.buckets: dict[str, int] = {}
        self.memory: set[str] = set()

    def config(self) -> dict[str, Any]:
        """The filter's parameters."""
        return {
            "scaffold": self.scaffold,
            "bucket_size": self.bucket_size,
            "min_score": self.min_score,
            "repeat_penalty": self.repeat_penalty,
        }

    def __call__(self, smiles: Sequence[str | None], scores: Sequence[float | None]) -> list[float | None]:
        """Filtered scores, updating the memory in batch order; None scores and invalid SMILES pass through."""
        if len(smiles) != len(scores):
            raise ValueError(f"got {len(smiles)} SMILES but {len(scores)} scores")
        filtered = []
        for s, score in zip(smiles, scores, strict=True):
            mol = parse_smiles(s)
            canonical = None if mol is None else canonical_smiles(mol)
            if canonical is None or score is None:
                filtered.append(score)
                continue
            if canonical in self.memory:
                filtered.append(float(score) * self.repeat_penalty)
                continue
            if score >= self.min_score:
                scaffold = scaffold_of(mol, self.scaffold)
                self.memory.add(canonical)
                self.buckets[scaffold] = self.buckets.get(scaffold, 0) + 1
                if self.buckets[scaffold] > self.bucket_size:
                    score = 0.0
            filtered.append(float(score))
        return filtered

    def wrap(
        self, reward_func: Callable[..., list[float]], extract: Callable[[Any, Any], str | None] | None = None
    ) -> FilteredReward:
        """A TRL reward function that applies this filter to `reward_func`'s rewards (named `<name>_df`);
        `extract(completion, prompt)` reads each completion's SMILES (default: `extract_smiles`, prompt ignored)."""
        return FilteredReward(self, reward_func, extract)

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (config, buckets, memorised SMILES) for trainer checkpoints."""
        return {"config": self.config(), "buckets": dict(self.buckets), "memory": sorted(self.memory)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` output; a state saved with different parameters is refused."""
        if not isinstance(state, dict) or not {"config", "buckets", "memory"} <= set(state):
            raise ValueError("not a DiversityFilter state dict: expected keys config, buckets, memory")
        if state["config"] != self.config():
            raise ValueError(
                f"diversity filter state was saved with {state['config']}, this filter has {self.config()}"
            )
        try:
            buckets = {str(k): int(v) for k, v in state["buckets"].items()}
            memory = {str(s) for s in state["memory"]}
        except (AttributeError, TypeError, ValueError) as error:
            raise ValueError(f"malformed DiversityFilter state dict ({error!r})") from error
        self.buckets, self.memory = buckets, memory


class FilteredReward:
    """TRL reward function: `reward_func`'s rewards through a diversity filter (a class, so it pickles).

    Logs the fraction of completions the filter penalised and the number of scaffold buckets when TRL
    passes `log_metric`.
    """

    def __init__(
        self,
        diversity_filter: DiversityFilter,
        reward_func: Callable[..., list[float]],
        extract: Callable[[Any, Any], str | None] | None = None,
    ) -> None:
        self.diversity_filter = diversity_filter
        self.reward_func = reward_func
        self.extract = extract or _extract_ignoring_prompt  # module-level functions, so the reward pickles
        self.__name__ = f"{getattr(reward_func, '__name__', type(reward_func).__name__)}_df"

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        rewards = self.reward_func(prompts=prompts, completions=completions, **kwargs)
        smiles = [self.extract(c, p) for c, p in zip(completions, prompts, strict=True)]
        result = self.diversity_filter(smiles, rewards)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and rewards:
            penalised = sum(
                1 for before, after in zip(rewards, result, strict=True) if before is not None and after < before
            )
            log_metric("diversity_filter/penalised_fraction", penalised / len(rewards))
            log_metric("diversity_filter/scaffolds", float(len(self.diversity_filter.buckets)))
        return result
