"""The reward cache: one oracle call per canonical SMILES, an exact call history, and the process pool."""

from __future__ import annotations

import json
import logging
import os

import pytest

from divrl.tasks.molecules.rewards import MPO
from divrl.tasks.molecules.scoring import CachedScorer, OracleCall


class CountingOracle:
    """Picklable oracle that records what it was asked (length of the SMILES / 100)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, smiles: str) -> float:
        self.calls.append(smiles)
        return len(smiles) / 100


def test_cache_counts_hits_misses_and_records_only_real_calls() -> None:
    oracle = CountingOracle()
    scorer = CachedScorer(oracle)
    first = scorer.score(["CCO", "OCC", "c1ccccc1", None, "garbage", "CCO"])
    assert first == [0.03, 0.03, 0.08, 0.0, 0.0, 0.03]
    assert oracle.calls == ["CCO", "c1ccccc1"]  # canonical, once each, first-appearance order
    assert (scorer.misses, scorer.hits) == (2, 2)  # invalid strings are neither
    second = scorer.score(["C(O)C", "CCN"])
    assert second == [0.03, 0.03]
    assert oracle.calls == ["CCO", "c1ccccc1", "CCN"]
    assert scorer.history == [OracleCall("CCO", 0.03), OracleCall("c1ccccc1", 0.08), OracleCall("CCN", 0.03)]
    assert (scorer.misses, scorer.hits, scorer.oracle_calls) == (3, 3, 3)
    assert scorer.hit_rate == pytest.approx(0.5)


def test_state_dict_round_trips_through_json() -> None:
    scorer = CachedScorer(CountingOracle())
    scorer.score(["CCO", "CCO", "CCN"])
    restored = CachedScorer(oracle := CountingOracle())
    restored.load_state_dict(json.loads(json.dumps(scorer.state_dict())))
    assert restored.history == scorer.history and restored.cache == scorer.cache
    assert (restored.hits, restored.misses) == (1, 2)
    assert restored.score(["OCC"]) == [0.03] and oracle.calls == []  # served from the restored cache
    with pytest.raises(ValueError, match="not a CachedScorer state dict"):
        restored.load_state_dict({"history": []})


def test_misconfiguration_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="workers"):
        CachedScorer(MPO(), workers=0)
    with pytest.raises(ValueError, match="oracle must be a callable"):
        CachedScorer("qed")  # type: ignore[arg-type]


MOLECULES = [
    "CC(=O)Oc1ccccc1C(=O)O",
    "Cn1c(=O)c2c(ncn2C)n(C)c1=O",
    "CC(=O)Nc1ccc(O)cc1",
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",
    "c1ccc2ccccc2c1",
    "CCN(CC)CC",
    "O=C(O)c1ccccc1",
    "CC1=CC(=O)C=CC1=O",
    "Clc1ccc(Cl)cc1",
    "CCOC(=O)c1ccccc1N",
    "NC(=O)c1cccnc1",
    "CC(C)(C)c1ccc(O)cc1",
]


def test_process_pool_matches_serial_scores() -> None:
    """Above the threshold the batch goes through spawned workers, with the same scores and history."""
    serial = CachedScorer(MPO(sanity=None))  # every molecule reaches the oracle (several are below 9 heavy atoms)
    expected = serial.score(MOLECULES)
    with CachedScorer(MPO(sanity=None), workers=2, pool_threshold=8, chunk_size=3) as pooled:
        assert pooled.score(MOLECULES[:4]) == expected[:4]  # 4 new molecules < threshold: serial
        assert pooled.pool_batches == 0
        assert pooled.score(MOLECULES) == expected  # 8 new molecules: through the pool
        assert pooled.pool_batches == 1
        assert pooled.history == serial.history
        assert (pooled.hits, pooled.misses) == (4, 12)


def test_unpicklable_oracle_falls_back_to_serial(caplog: pytest.LogCaptureFixture) -> None:
    scorer = CachedScorer(lambda s: 0.5, workers=2, pool_threshold=1)
    with caplog.at_level(logging.WARNING):
        assert scorer.score(["CCO", "CCN"]) == [0.5, 0.5]
    assert scorer.pool_batches == 0
    assert any("not picklable" in r.message for r in caplog.records)


class DiesInWorkers:
    """Scores 0.5 in the parent process and kills any worker process that calls it."""

    def __init__(self) -> None:
        self.parent = os.getpid()

    def __call__(self, smiles: str) -> float:
        if os.getpid() != self.parent:
            os._exit(1)
        return 0.5


def test_broken_pool_falls_back_to_serial(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), CachedScorer(DiesInWorkers(), workers=2, pool_threshold=2) as scorer:
        assert scorer.score(["CCO", "CCN"]) == [0.5, 0.5]
        assert scorer.score(["CCC", "CCCC"]) == [0.5, 0.5]
    assert scorer.pool_batches == 0 and scorer.oracle_calls == 4
    assert sum("process pool failed" in r.message for r in caplog.records) == 1
