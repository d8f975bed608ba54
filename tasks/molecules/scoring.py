"""A reward cache keyed by canonical SMILES, with an oracle-call history and a process pool.

Repeats are common under RL, and the oracle (QED alone ~2-3 ms per molecule) dominates scoring, so
every canonical SMILES is scored once. The history records real oracle calls only, in order: cache
hits and invalid strings (scored 0 without an oracle call) consume no budget, which is what Generative
Yield and Oracle Burden count. Batches with at least `pool_threshold` uncached molecules are scored
by `workers` processes. Workers are spawned, so the oracle must be picklable and a script that enables
them needs the usual `if __name__ == "__main__":` guard; when either is missing, or the pool breaks,
scoring falls back to serial with a warning instead of failing.
An oracle with a `rejection(smiles)` method (the MPO with its chemistry sanity gate) screens new molecules
first: a rejected molecule scores 0 without an oracle call, like an invalid string, and `rejected` maps its
canonical SMILES to the reason.
"""

from __future__ import annotations

import functools
import json
import logging
import multiprocessing
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, NamedTuple

from divrl.tasks.molecules.chem import canonicalize

logger = logging.getLogger(__name__)

Oracle = Callable[[str], float]
# Memo of raw string -> canonical SMILES: exact repeats (common under RL) skip RDKit entirely.
canonical_key = functools.lru_cache(maxsize=2**16)(canonicalize)


class OracleCall(NamedTuple):
    """One real oracle evaluation: the canonical SMILES and the score it got."""

    smiles: str
    score: float


_worker_oracle: Oracle | None = None


def _init_worker(oracle: Oracle) -> None:
    """Pool initializer: keep the oracle in the worker so chunks carry only SMILES."""
    global _worker_oracle
    _worker_oracle = oracle


def _score_chunk(smiles: list[str]) -> list[float]:
    """Score a chunk of canonical SMILES with the worker's oracle."""
    assert _worker_oracle is not None, "worker used before _init_worker"
    return [float(_worker_oracle(s)) for s in smiles]


def read_history(path: str | Path) -> list[list[Any]]:
    """Oracle calls from a JSONL file of {"smiles": ..., "score": ...} lines (as `write_history` writes them), in
    order; ValueError naming the file and line when one is not such an object."""
    calls = []
    with Path(path).open() as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                calls.append([str(entry["smiles"]), float(entry["score"])])
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not an oracle call {{smiles, score}} ({error})") from error
    return calls


def write_history(path: str | Path, history: Sequence[tuple[str, float]]) -> None:
    """Write oracle calls as JSONL, one {"call", "smiles", "score"} line each (call counts from 1)."""
    with Path(path).open("w") as handle:
        for index, (smiles, score) in enumerate(history, 1):
            handle.write(json.dumps({"call": index, "smiles": smiles, "score": score}) + "\n")


class CachedScorer:
    """Scores SMILES with `oracle` once per canonical SMILES; counts hits/misses; records oracle calls."""

    def __init__(self, oracle: Oracle, *, workers: int = 1, pool_threshold: int = 256, chunk_size: int = 16):
        if not callable(oracle):
            raise ValueError(f"oracle must be a callable SMILES -> float, got {type(oracle).__name__}")
        for field, value in (("workers", workers), ("pool_threshold", pool_threshold), ("chunk_size", chunk_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, got {value!r}")
        self.oracle = oracle
        self.workers = workers
        self.pool_threshold = pool_threshold
        self.chunk_size = chunk_size
        self.cache: dict[str, float] = {}
        self.history: list[OracleCall] = []
        self.hits = 0
        self.misses = 0
        self.pool_batches = 0  # batches that went through the process pool
        self.rejected: dict[str, str] = {}  # canonical SMILES -> why the oracle's sanity gate rejects it
        self._executor: ProcessPoolExecutor | None = None
        self._pool_unusable = False

    def score(self, smiles: Sequence[str | None]) -> list[float]:
        """Scores of `smiles` (any strings or None; invalid or gate-rejected ones score 0 without an oracle call)."""
        canonical = [canonical_key(s) if isinstance(s, str) else None for s in smiles]
        new = [s for s in dict.fromkeys(c for c in canonical if c is not None) if s not in self.cache]
        screen = getattr(self.oracle, "rejection", None)
        if callable(screen):
            for s in new:
                if s not in self.rejected and (reason := screen(s)) is not None:
                    self.rejected[s] = reason
            canonical = [None if c in self.rejected else c for c in canonical]
            new = [s for s in new if s not in self.rejected]
        for s, value in zip(new, self._call_oracle(new), strict=True):
            self.cache[s] = value
            self.history.append(OracleCall(s, value))
        valid = sum(c is not None for c in canonical)
        self.misses += len(new)
        self.hits += valid - len(new)
        return [0.0 if c is None else self.cache[c] for c in canonical]

    @property
    def oracle_calls(self) -> int:
        """Number of real oracle evaluations so far."""
        return len(self.history)

    @property
    def hit_rate(self) -> float:
        """Fraction of valid molecules served from the cache (0 before any)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def _call_oracle(self, smiles: list[str]) -> list[float]:
        """Oracle scores for uncached canonical SMILES, through the pool for large enough batches."""
        if self.workers > 1 and len(smiles) >= self.pool_threshold and self._ensure_pool():
            chunks = [smiles[i : i + self.chunk_size] for i in range(0, len(smiles), self.chunk_size)]
            try:
                values = [value for chunk in self._executor.map(_score_chunk, chunks) for value in chunk]
            except (BrokenProcessPool, RuntimeError, OSError) as error:  # e.g. no __main__ guard under spawn
                logger.warning("process pool failed (%s): scoring serially from now on", error)
                self.close()
                self._pool_unusable = True
            else:
                self.pool_batches += 1
                return values
        return [float(self.oracle(s)) for s in smiles]

    def _ensure_pool(self) -> bool:
        """Start the worker pool once; False (with a warning) when the oracle cannot be pickled."""
        if self._executor is None and not self._pool_unusable:
            try:
                pickle.dumps(self.oracle)
            except Exception as error:
                logger.warning("oracle is not picklable (%s): scoring serially, without a process pool", error)
                self._pool_unusable = True
                return False
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(self.oracle,),
            )
        return self._executor is not None

    def close(self) -> None:
        """Shut the worker pool down (a later large batch starts a new one)."""
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def __enter__(self) -> CachedScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the live pool (TRL may pickle reward functions)."""
        return {**self.__dict__, "_executor": None}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able cache, oracle-call history and counters, for checkpoints."""
        return {
            "history": [[call.smiles, call.score] for call in self.history],
            "hits": self.hits,
            "misses": self.misses,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned; the cache is rebuilt from the history."""
        try:
            history = [OracleCall(str(s), float(v)) for s, v in state["history"]]
            hits, misses = int(state["hits"]), int(state["misses"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"not a CachedScorer state dict ({error!r}); expected keys history, hits, misses"
            ) from error
        self.history = history
        self.cache = {call.smiles: call.score for call in history}
        self.hits, self.misses = hits, misses
