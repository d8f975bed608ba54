"""The molecule task object for the divrl trainers (protocol in `divrl.task`).

Reward: the cached objective (divrl's cheap MPO, or a PMO oracle) of the molecule each completion gives where its
prompt asks for it (`chem.answer_smiles`: after a base prompt ending in "SMILES:" or an empty one, the first token of
the first line), optionally through a scaffold diversity filter; with the MPO, molecules failing the chemistry sanity
gate score 0 (`sanity`). IPS outcome
key: the canonical SMILES. QD behaviour: molecular weight and Crippen logP, each mapped linearly onto [0, 1] from a
configurable range (values outside are clipped).
"""

from __future__ import annotations

import functools
import inspect
import os
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rdkit import Chem
from rdkit.Chem import Crippen, Descriptors

from divrl.task import JOURNAL_FILE
from divrl.tasks.molecules.chem import answer_smiles, parse_smiles, quiet_rdkit
from divrl.tasks.molecules.data import CLM_PROMPT
from divrl.tasks.molecules.diversity_filter import DiversityFilter
from divrl.tasks.molecules.metrics import check_budget
from divrl.tasks.molecules.pmo import PMOOracle, check_oracle_name
from divrl.tasks.molecules.rewards import DEFAULT_COMPONENTS, MPO, SmilesComponent
from divrl.tasks.molecules.scoring import CachedScorer, read_history

DEFAULT_MOLWT_RANGE = (100.0, 600.0)
DEFAULT_LOGP_RANGE = (-2.0, 6.0)


class MoleculeReward:
    """TRL reward function `f(prompts, completions, **columns) -> list[float]` over a `CachedScorer`.

    Completions may be strings or chat lists; each is read where its prompt asks for the answer
    (`answer_smiles`). When TRL passes `log_metric`, it logs the batch's validity, the fraction the chemistry
    sanity gate rejected, the cache hit rate and the number of oracle calls so far under `molecules/`.
    """

    def __init__(self, scorer: CachedScorer, name: str = "molecule_mpo") -> None:
        self.scorer = scorer
        self.__name__ = name

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float]:
        smiles = [answer_smiles(c, p) for c, p in zip(completions, prompts, strict=True)]
        scores = self.scorer.score(smiles)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and smiles:
            log_metric("molecules/validity", sum(s is not None for s in smiles) / len(smiles))
            rejected = sum(s is not None and s in self.scorer.rejected for s in smiles)
            log_metric("molecules/sanity_rejected", rejected / len(smiles))
            log_metric("molecules/cache_hit_rate", self.scorer.hit_rate)
            log_metric("molecules/oracle_calls", float(self.scorer.oracle_calls))
        return scores


def _morgan_fingerprint(smiles: str) -> tuple[float, ...]:
    """Morgan radius-2 2048-bit fingerprint of a canonical SMILES as 0/1 floats."""
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    return tuple(float(bit) for bit in generator.GetFingerprintAsNumPy(parse_smiles(smiles)))


def _unit_interval(value: float, bounds: tuple[float, float]) -> float:
    """`value` mapped linearly from `bounds` onto [0, 1], clipped."""
    low, high = bounds
    return min(1.0, max(0.0, (value - low) / (high - low)))


def _only_train(split: str) -> None:
    """Refuse any split but 'train': prompts differ only in their few-shot examples, so there is no test split."""
    if split != "train":
        raise ValueError(
            f"the molecule task has only a 'train' split (prompts differ only in their examples), got {split!r}"
        )


def _diversity_filter(spec: DiversityFilter | Mapping[str, Any] | None) -> DiversityFilter | None:
    """The task's diversity filter from a filter, a dict of `DiversityFilter` keyword arguments, or None."""
    if spec is None or isinstance(spec, DiversityFilter):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"diversity_filter must be a DiversityFilter or a dict of its arguments, got {type(spec).__name__}"
        )
    accepted = set(inspect.signature(DiversityFilter).parameters)
    unknown = [name for name in spec if name not in accepted]
    if unknown:
        raise ValueError(f"unknown diversity_filter argument(s) {unknown}; accepted: {sorted(accepted)}")
    return DiversityFilter(**spec)


def _objective(name: str, *, components: Sequence[str], extra_components: Mapping[str, SmilesComponent] | None,
               weights: Mapping[str, float] | None, hbd_threshold: int, sanity: Any) -> MPO | PMOOracle:
    """The task's objective: divrl's cheap MPO ("mpo", configured by the other arguments) or a PMO oracle by name,
    which takes none of the MPO's settings (PMO scores every valid molecule: no chemistry gate)."""
    if name == "mpo":
        return MPO(components, extra_components=extra_components, weights=weights, hbd_threshold=hbd_threshold,
                   sanity=sanity)
    if not isinstance(name, str):
        raise ValueError(f"objective must be 'mpo' or a PMO oracle name, got {name!r}")
    check_oracle_name(name)
    settings = {"components": (tuple(components) != tuple(DEFAULT_COMPONENTS), components),
                "extra_components": (extra_components is not None, extra_components),
                "weights": (weights is not None, weights), "hbd_threshold": (hbd_threshold != 3, hbd_threshold),
                "sanity": (sanity not in ("auto", False, None), sanity)}
    given = [f"{field}={value!r}" for field, (is_set, value) in settings.items() if is_set]
    if given:
        raise ValueError(f"objective {name!r} is a PMO oracle: {', '.join(given)} configure divrl's MPO and do not "
                         "apply (drop them, or use objective=mpo)")
    return PMOOracle(name)


class MoleculeTask:
    """SMILES generation with cheap RDKit rewards; implements reward_funcs, outcome_key, behavior, embed (Morgan
    fingerprints) and augment (randomised SMILES of a chemical LM's completion, for experience replay).

    `objective` is divrl's cheap MPO ("mpo", the default) or one of PMO's RDKit oracles by name (e.g.
    "osimertinib_mpo", "median1": `divrl.tasks.molecules.pmo.PMO_ORACLES`), scored as PMO scores them (no chemistry
    gate). `components`, `extra_components`, `weights`, `hbd_threshold` and `sanity` (the chemistry gate: "auto",
    false, or a dict of `ChemistryGate` arguments such as {min_heavy_atoms: 12}) configure the MPO (see `MPO`);
    `diversity_filter` (a `DiversityFilter`, or a dict of its keyword arguments as recipes' task_args
    give it) wraps the reward; `workers` > 1 scores batches with at least `pool_threshold`
    new molecules in a process pool (see `CachedScorer`); the ranges normalise the QD descriptors.
    `oracle_budget` (calls) is exact: no more real oracle calls are made (later new molecules score 0, as in PMO)
    and training ends after the step that spent it (`stop_reason`), also across kills (the run's journal) and
    processes (`begin_run`); `oracle_history` (a JSONL file of {"smiles", "score"} lines, e.g. an earlier stage's
    calls, canonicalised and checked on load) opens the history and cache, and its calls count towards the budget.
    In multi-process training the main process owns the cache, history and budget; each process keeps its own
    diversity filter memory.
    """

    name = "molecules"
    behavior_dims = 2
    journal_file = JOURNAL_FILE  # every real oracle call of a training run, in its output_dir

    def __init__(
        self,
        components: Sequence[str] = DEFAULT_COMPONENTS,
        *,
        extra_components: Mapping[str, SmilesComponent] | None = None,
        weights: Mapping[str, float] | None = None,
        hbd_threshold: int = 3,
        sanity: Any = "auto",
        diversity_filter: DiversityFilter | Mapping[str, Any] | None = None,
        workers: int = 1,
        pool_threshold: int = 256,
        molwt_range: tuple[float, float] = DEFAULT_MOLWT_RANGE,
        logp_range: tuple[float, float] = DEFAULT_LOGP_RANGE,
        oracle_budget: int | None = None,
        oracle_history: str | None = None,
        objective: str = "mpo",
    ) -> None:
        for field, (low, high) in (("molwt_range", molwt_range), ("logp_range", logp_range)):
            if not low < high:
                raise ValueError(f"{field} must be (low, high) with low < high, got {(low, high)}")
        self.objective = _objective(objective, components=components, extra_components=extra_components,
                                    weights=weights, hbd_threshold=hbd_threshold, sanity=sanity)
        check_budget(oracle_budget)
        self.scorer = CachedScorer(self.objective, workers=workers, pool_threshold=pool_threshold,
                                   budget=oracle_budget)
        self.oracle_budget = oracle_budget
        if oracle_history is not None:
            self.scorer.load_state_dict({"history": read_history(oracle_history), "hits": 0, "misses": 0})
        self.diversity_filter = _diversity_filter(diversity_filter)
        self.molwt_range = molwt_range
        self.logp_range = logp_range
        self._descriptors = functools.lru_cache(maxsize=100_000)(self._descriptors_of)
        self._fingerprints = functools.lru_cache(maxsize=20_000)(_morgan_fingerprint)

    def stop_reason(self) -> str | None:
        """Why training should stop now (the oracle budget is spent), or None."""
        calls = self.scorer.oracle_calls
        if self.oracle_budget is not None and calls >= self.oracle_budget:
            return f"oracle budget spent: {calls} calls of {self.oracle_budget}"
        return None

    def begin_run(self, run_dir: str, *, resumed: bool) -> None:
        """When training starts (the trainer calls it on every process): scoring shared across processes, so that
        the main process owns the cache, history and budget, and there every real oracle call journaled to
        RUN_DIR/`journal_file` as it is made. A resumed run (`resumed`) keeps the journal: the calls a killed run
        made after its last checkpoint are not paid again (`CachedScorer.attach_journal`)."""
        from accelerate import PartialState

        self.scorer.share_across_processes()
        if PartialState().is_main_process:
            os.makedirs(run_dir, exist_ok=True)
            self.scorer.attach_journal(os.path.join(run_dir, self.journal_file), fresh=not resumed)

    def reward_funcs(self) -> list[Callable[..., list[float]]]:
        """One reward function: the cached MPO, through the diversity filter when one is configured."""
        reward = MoleculeReward(self.scorer)
        return [reward if self.diversity_filter is None else self.diversity_filter.wrap(reward, extract=answer_smiles)]

    def outcome_key(self, completion: Any, **row: Any) -> str | None:
        """IPS outcome: the canonical SMILES of the completion's molecule, None when there is none."""
        return answer_smiles(completion, row.get("prompt"))

    def behavior(self, completion: Any, **row: Any) -> tuple[float, float] | None:
        """QD descriptor in [0, 1]^2: (molecular weight, Crippen logP) normalised by their ranges."""
        smiles = answer_smiles(completion, row.get("prompt"))
        return None if smiles is None else self._descriptors(smiles)

    def augment(self, completion: str, rng: random.Random, **row: Any) -> str:
        """A chemical LM's completion (the SMILES itself, after the empty prompt) written as another SMILES of the same
        molecule, its atoms renumbered by `rng`: Saturn's augmented memory replays such randomised SMILES so that the
        model learns the molecule rather than one spelling. Other completions (few-shot, chat) come back as written."""
        mol = parse_smiles(completion.strip()) if row.get("prompt") == CLM_PROMPT else None
        if mol is None:
            return completion
        order = list(range(mol.GetNumAtoms()))
        rng.shuffle(order)
        with quiet_rdkit():
            return Chem.MolToSmiles(Chem.RenumberAtoms(mol, order), canonical=False)

    def embed(self, completion: Any, **row: Any) -> list[float] | None:
        """The molecule's Morgan radius-2 2048-bit fingerprint as 0/1 floats (SGRPO's set diversity compares these
        by Tanimoto; the novelty bonus with `novelty_embedding: task`); None without a molecule."""
        smiles = answer_smiles(completion, row.get("prompt"))
        return None if smiles is None else list(self._fingerprints(smiles))

    def _descriptors_of(self, smiles: str) -> tuple[float, float] | None:
        """Normalised (MolWt, logP) of a canonical SMILES (memoised per task in `_descriptors`)."""
        mol = parse_smiles(smiles)
        if mol is None:
            return None
        with quiet_rdkit():
            molwt, logp = Descriptors.MolWt(mol), Crippen.MolLogP(mol)
        return _unit_interval(molwt, self.molwt_range), _unit_interval(logp, self.logp_range)

    def train_dataset(
        self,
        split: str = "train",
        style: str = "base",
        seed: int = 0,
        limit: int | None = None,
        n_exemplars: int = 3,
        **_: Any,
    ) -> Any:
        """`limit` (default 64) few-shot prompts for GRPO; generation is unconditional, so there is no test split."""
        from divrl.tasks.molecules.data import build_dataset

        _only_train(split)
        return build_dataset(limit or 64, style=style, n_shots=n_exemplars, seed=seed)

    def sft_dataset(
        self,
        split: str = "train",
        style: str = "base",
        seed: int = 0,
        limit: int | None = None,
        n_exemplars: int = 3,
        sample_seed: int = 0,
        **_: Any,
    ) -> Any:
        """Prompt-completion rows for a supervised warm start (`divrl sft`): the shipped molecules that are never a
        few-shot example (`data.sft_targets`), shuffled by `sample_seed` (the first `limit`, default all), each
        after its own seeded few-shot prompt (`seed`) and written as the answer: the prompt's "SMILES:" line
        continued with the molecule and a newline (base), or the assistant's reply (chat)."""
        import random

        from datasets import Dataset

        from divrl.tasks.molecules.data import build_rows, sft_targets

        _only_train(split)
        targets = sft_targets()
        random.Random(f"{sample_seed}-sft").shuffle(targets)
        targets = targets[:limit] if limit else targets
        rows = build_rows(len(targets), style=style, n_shots=n_exemplars, seed=seed)
        return Dataset.from_list([
            {"prompt": row["prompt"],
             "completion": f" {smiles}\n" if style == "base" else [{"role": "assistant", "content": smiles}]}
            for row, smiles in zip(rows, targets, strict=True)])

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state for checkpoints: the MPO config, the reward cache with its oracle-call history and
        counters (`CachedScorer.state_dict`), and the diversity filter's buckets and memory when there is one."""
        state: dict[str, Any] = {"mpo": self.objective.config(), "scorer": self.scorer.state_dict()}
        if self.diversity_filter is not None:
            state["diversity_filter"] = self.diversity_filter.state_dict()
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore `state_dict` output; a state from another MPO or diversity filter setup is refused (ValueError)."""
        if not isinstance(state, Mapping) or not {"mpo", "scorer"} <= set(state):
            raise ValueError("not a MoleculeTask state dict: expected keys mpo, scorer (and diversity_filter)")
        if state["mpo"] != self.objective.config():
            raise ValueError(
                f"the checkpoint's cached rewards come from objective {state['mpo']}, this task uses "
                f"{self.objective.config()}"
            )
        if ("diversity_filter" in state) != (self.diversity_filter is not None):
            raise ValueError("the checkpoint and this task disagree on whether a diversity filter is used")
        self.scorer.load_state_dict(state["scorer"])
        if self.diversity_filter is not None:
            self.diversity_filter.load_state_dict(state["diversity_filter"])
