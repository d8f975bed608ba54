"""A reward cache keyed by canonical SMILES, with an oracle-call history, an exact oracle budget and a process pool.

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

The budget is exact: once `budget` real calls are made, new molecules score 0 without a call (PMO's rule; counted in
`over_budget`). Two things keep it exact where a run is killed or spans processes:
- A journal (`attach_journal`): every real call is appended to a JSONL file as it is made, flushed (a kill of the
  process loses nothing written) and synced to disk once per batch. A resumed run restores the checkpoint's history,
  and the journal's calls beyond it are prepaid: when the resumed run asks for those molecules again, their journaled
  scores are used without calling the oracle, so the history is the uninterrupted run's and no molecule is paid twice.
  Where generation is not reproducible, the first new molecule the killed run never asked for adopts the remaining
  prepaid calls into the history (with a warning), so they still count towards the budget.
- Sharing across processes (`share_across_processes`): under several processes, the main process owns the cache,
  history, budget and journal; each batch's molecules are gathered there, scored once and the scores and the calls
  broadcast back, so every process holds the same history and the budget is global.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import multiprocessing
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import IO, Any, NamedTuple

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


def read_history(path: str | Path) -> list[OracleCall]:
    """Oracle calls from a JSONL file of {"smiles": ..., "score": ...} lines (as `write_history` writes them), in
    order, each SMILES canonicalised (so that a later request of the same molecule is a cache hit). ValueError naming
    the file and line for a line that is not such an object, a SMILES that is not a molecule, a score that is not a
    finite number, or one molecule given two scores; naming the file for bytes that are not UTF-8."""
    calls: list[OracleCall] = []
    scores: dict[str, tuple[float, int]] = {}
    try:
        with Path(path).open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    call = _history_line(line, f"{path}:{number}")
                    first = scores.setdefault(call.smiles, (call.score, number))
                    if first[0] != call.score:
                        raise ValueError(f"{path}:{number}: {call.smiles} scored {call.score}, but "
                                         f"{first[0]} on line {first[1]}: one molecule, one oracle score")
                    calls.append(call)
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}): expected JSONL "
                         "oracle calls") from None
    return calls


def _history_line(line: str, where: str) -> OracleCall:
    """One JSONL line of oracle history as a canonical OracleCall; ValueError starting with `where` otherwise."""
    try:
        entry = json.loads(line)
        smiles, score = entry["smiles"], entry["score"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{where}: not an oracle call {{smiles, score}} ({error})") from None
    canonical = canonical_key(smiles) if isinstance(smiles, str) else None
    if canonical is None:
        raise ValueError(f"{where}: {smiles!r} is not a valid SMILES (an oracle call scores a molecule)")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise ValueError(f"{where}: score {score!r} is not a finite number")
    return OracleCall(canonical, float(score))


def _journal_line(index: int, call: tuple[str, float]) -> str:
    """One oracle call as a JSONL line {"call", "smiles", "score"} (call counts from 1)."""
    return json.dumps({"call": index, "smiles": call[0], "score": call[1]}) + "\n"


def write_history(path: str | Path, history: Sequence[tuple[str, float]]) -> None:
    """Write oracle calls as JSONL, one {"call", "smiles", "score"} line each (call counts from 1), atomically."""
    temporary = Path(f"{path}.tmp")
    with temporary.open("w", encoding="utf-8") as handle:
        handle.writelines(_journal_line(index, call) for index, call in enumerate(history, 1))
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


class CachedScorer:
    """Scores SMILES with `oracle` once per canonical SMILES, at most `budget` real calls; counts hits/misses;
    records oracle calls (see the module docstring for the journal and sharing across processes)."""

    def __init__(self, oracle: Oracle, *, workers: int = 1, pool_threshold: int = 256, chunk_size: int = 16,
                 budget: int | None = None):
        if not callable(oracle):
            raise ValueError(f"oracle must be a callable SMILES -> float, got {type(oracle).__name__}")
        for field, value in (("workers", workers), ("pool_threshold", pool_threshold), ("chunk_size", chunk_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{field} must be a positive integer, got {value!r}")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValueError(f"budget must be a positive number of oracle calls, got {budget!r}")
        self.oracle = oracle
        self.workers = workers
        self.pool_threshold = pool_threshold
        self.chunk_size = chunk_size
        self.budget = budget
        self.cache: dict[str, float] = {}
        self.history: list[OracleCall] = []
        self.hits = 0
        self.misses = 0
        self.over_budget = 0  # new molecules scored 0 without a call because the budget was spent
        self.pool_batches = 0  # batches that went through the process pool
        self.rejected: dict[str, str] = {}  # canonical SMILES -> why the oracle's sanity gate rejects it
        self._executor: ProcessPoolExecutor | None = None
        self._pool_unusable = False
        self._journal: IO[str] | None = None
        self._journal_path: Path | None = None
        self._journaled: list[OracleCall] = []  # the journal's calls when it was attached
        self._prepaid: dict[str, float] = {}  # journaled calls beyond the history, in journal order
        self._paid_here: set[str] = set()  # molecules this process journaled (not a killed run's)
        self._reported: set[str] = set()  # a killed run's molecules already named in the warning (once each)
        self._journal_started = False  # the journal holds only the history it was started with
        self._shared = False

    # ------------------------------------------------------------------ scoring
    def score(self, smiles: Sequence[str | None]) -> list[float]:
        """Scores of `smiles` (any strings or None; invalid or gate-rejected ones, and new molecules once the budget
        is spent, score 0 without an oracle call). When shared across processes, every process calls it together."""
        return self._score_shared(smiles) if self._shared else self._score_here(smiles)

    def _score_here(self, smiles: Sequence[str | None]) -> list[float]:
        """`score` in this process alone."""
        canonical = [canonical_key(s) if isinstance(s, str) else None for s in smiles]
        new = [s for s in dict.fromkeys(c for c in canonical if c is not None) if s not in self.cache]
        screen = getattr(self.oracle, "rejection", None)
        if callable(screen):
            for s in new:
                if s not in self.rejected and (reason := screen(s)) is not None:
                    self.rejected[s] = reason
            canonical = [None if c in self.rejected else c for c in canonical]
            new = [s for s in new if s not in self.rejected]
        to_call = []
        for s in new:
            if s in self.cache:  # adopted from the prepaid calls earlier in this loop
                continue
            if s in self._prepaid:
                self._record(OracleCall(s, self._prepaid.pop(s)))
            else:
                self._adopt_prepaid()  # a molecule the killed run never asked for: the rest will not come back
                to_call.append(s)
        room = len(to_call) if self.budget is None else max(0, self.budget - len(self.history))
        self.over_budget += max(0, len(to_call) - room)
        for call in self._call_oracle(to_call[:room]):
            self._record(call, journal=True)
        if to_call[:room] and self._journal is not None:
            os.fsync(self._journal.fileno())
        valid = sum(c is not None for c in canonical)
        self.misses += len(new)
        self.hits += valid - len(new)
        return [0.0 if c is None else self.cache.get(c, 0.0) for c in canonical]

    def _record(self, call: OracleCall, journal: bool = False) -> None:
        """Add a paid call to the cache and history; a call made now also goes to the journal, flushed at once."""
        self.cache[call.smiles] = call.score
        self.history.append(call)
        if journal and self._journal is not None:
            try:
                self._journal.write(_journal_line(len(self.history), call))
                self._journal.flush()
                self._journaled.append(call)
                self._paid_here.add(call.smiles)
            except OSError as error:
                raise OSError(f"cannot append oracle call {len(self.history)} to the journal {self._journal_path} "
                              f"({error.strerror or error}): the calls before it are in it; free space, then resume "
                              "with --resume_from_checkpoint true") from None
            self._journal_started = False

    def _adopt_prepaid(self) -> None:
        """Move every remaining prepaid call into the history: the resumed run diverged from the killed one, or a
        restored snapshot (a population's member scoring) moved on to other molecules than those it paid for."""
        if not self._prepaid:
            return
        killed_run = {s for s in self._prepaid if s not in self._paid_here}
        if unreported := killed_run - self._reported:  # a restored snapshot may bring them back: warn once
            logger.warning("the resumed run did not ask again for %d molecule(s) its killed run paid for (generation "
                           "is not reproducible here): their journaled calls join the history and count towards the "
                           "budget", len(unreported))
            self._reported |= unreported
        if len(self._prepaid) > len(killed_run):
            logger.info("%d molecule(s) this run paid for before restoring an earlier state join the history and "
                        "count towards the budget", len(self._prepaid) - len(killed_run))
        prepaid, self._prepaid = self._prepaid, {}
        for s, value in prepaid.items():
            self._record(OracleCall(s, value))

    @property
    def oracle_calls(self) -> int:
        """Number of real oracle evaluations so far."""
        return len(self.history)

    @property
    def hit_rate(self) -> float:
        """Fraction of valid molecules served from the cache (0 before any)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def _call_oracle(self, smiles: list[str]) -> Iterator[OracleCall]:
        """Oracle calls for uncached canonical SMILES, yielded as they complete (a pool's chunk at a time, through
        the pool for large enough batches)."""
        done = 0
        if self.workers > 1 and len(smiles) >= self.pool_threshold and self._ensure_pool():
            chunks = [smiles[i : i + self.chunk_size] for i in range(0, len(smiles), self.chunk_size)]
            try:
                for chunk, values in zip(chunks, self._executor.map(_score_chunk, chunks), strict=True):
                    for s, value in zip(chunk, values, strict=True):
                        done += 1
                        yield OracleCall(s, value)
            except (BrokenProcessPool, RuntimeError, OSError) as error:  # e.g. no __main__ guard under spawn
                logger.warning("process pool failed (%s): scoring serially from now on", error)
                self.close()
                self._pool_unusable = True
            else:
                self.pool_batches += 1
                return
        for s in smiles[done:]:
            yield OracleCall(s, float(self.oracle(s)))

    # ------------------------------------------------------------------ several processes
    def share_across_processes(self) -> None:
        """Under several processes (accelerate), let the main process own the cache, history, budget and journal:
        `score` becomes a collective that every process calls with its own molecules. One process: no change."""
        from accelerate import PartialState

        self._shared = PartialState().num_processes > 1

    def _score_shared(self, smiles: Sequence[str | None]) -> list[float]:
        """`score` as a collective: molecules gathered on the main process, scored there once, scores and the new
        calls, rejections and counters broadcast back so that every process holds the same state."""
        from accelerate import PartialState
        from accelerate.utils import broadcast_object_list, gather_object

        state = PartialState()
        per_process = gather_object([list(smiles)])
        message: list[Any] = [None]
        if state.is_main_process:
            calls, rejected = len(self.history), len(self.rejected)
            flat = self._score_here([s for part in per_process for s in part])
            starts = [0]
            for part in per_process:
                starts.append(starts[-1] + len(part))
            message = [{"scores": [flat[a:b] for a, b in zip(starts, starts[1:], strict=False)],
                        "calls": [list(call) for call in self.history[calls:]],
                        "rejected": list(self.rejected.items())[rejected:],
                        "counts": (self.hits, self.misses, self.over_budget)}]
        broadcast_object_list(message, from_process=0)
        update = message[0]
        if not state.is_main_process:
            for s, value in update["calls"]:
                self._record(OracleCall(s, value))
            self.rejected.update(update["rejected"])
            self.hits, self.misses, self.over_budget = update["counts"]
        return update["scores"][state.process_index]

    # ------------------------------------------------------------------ the journal
    def attach_journal(self, path: str | Path, *, fresh: bool) -> None:
        """Journal every real call to `path` (JSONL, as `write_history` writes). `fresh` (a new run) or no file yet:
        the file is written with the current history. Otherwise the journal's calls that the history lacks
        (restored from a checkpoint, now or by a later `load_state_dict`) are prepaid; a journal that does not hold
        the history's calls with their scores belongs to another run and is refused (ValueError naming it)."""
        self.close_journal()
        path = Path(path)
        self._journal_path = path
        if fresh or not path.exists():
            self._start_journal()
        else:
            self._journaled = read_history(path)
            self._journal = path.open("a", encoding="utf-8")
            self._sync_journal()

    def _start_journal(self) -> None:
        """(Re)write the journal with the current history and journal from there; until a real call is made, a
        restored history (`load_state_dict`, e.g. from a checkpoint in another folder) rewrites it again."""
        if self._journal is not None:
            self._journal.close()
        write_history(self._journal_path, self.history)
        self._journaled, self._prepaid, self._journal_started = list(self.history), {}, True
        self._journal = self._journal_path.open("a", encoding="utf-8")

    def close_journal(self) -> None:
        """Stop journaling (the file stays)."""
        if self._journal is not None:
            self._journal.close()
        self._journal, self._journal_path, self._journaled, self._prepaid = None, None, [], {}
        self._journal_started, self._paid_here, self._reported = False, set(), set()

    def _sync_journal(self) -> None:
        """Prepay the journal's calls that the history lacks, in journal order; refuse a journal without every call
        of the history, or with another score for one."""
        if self._journal is None:
            return
        if self._journal_started:
            self._start_journal()
            return
        journaled = {call.smiles: call.score for call in self._journaled}
        for index, call in enumerate(self.history, 1):
            if journaled.get(call.smiles) != call.score:
                found = "lacks it" if call.smiles not in journaled else f"scores it {journaled[call.smiles]}"
                raise ValueError(f"{self._journal_path}: the run's oracle call {index} ({call.smiles}, {call.score}) "
                                 f"is not in this journal as it is ({found}): the journal belongs to another run; "
                                 "move it away to resume")
        self._prepaid = {s: score for s, score in journaled.items() if s not in self.cache}

    def close(self) -> None:
        """Shut the worker pool down (a later large batch starts a new one)."""
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def __enter__(self) -> CachedScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.close_journal()

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the live pool or journal (TRL may pickle reward functions)."""
        return {**self.__dict__, "_executor": None, "_journal": None}

    def state_dict(self) -> dict[str, Any]:
        """JSON-able cache, oracle-call history and counters, for checkpoints."""
        return {
            "history": [[call.smiles, call.score] for call in self.history],
            "hits": self.hits,
            "misses": self.misses,
            "over_budget": self.over_budget,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned; the cache is rebuilt from the history, and a journal's calls beyond
        it become prepaid."""
        try:
            history = [OracleCall(str(s), float(v)) for s, v in state["history"]]
            hits, misses = int(state["hits"]), int(state["misses"])
            over_budget = int(state.get("over_budget", 0))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"not a CachedScorer state dict ({error!r}); expected keys history, hits, misses"
            ) from error
        self.history = history
        self.cache = {call.smiles: call.score for call in history}
        self.hits, self.misses, self.over_budget = hits, misses, over_budget
        self._sync_journal()

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
