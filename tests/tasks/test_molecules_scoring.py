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


# ------------------------------------------------------------------ issue 57: an exact budget, a journal, checked input
def test_the_budget_is_a_hard_cap_on_real_calls() -> None:
    oracle = CountingOracle()
    scorer = CachedScorer(oracle, budget=2)
    assert scorer.score(["CCO", "CCN", "CCC", "CCO"]) == [0.03, 0.03, 0.0, 0.03]  # CCC: over budget, no call
    assert oracle.calls == ["CCO", "CCN"] and scorer.over_budget == 1 and scorer.oracle_calls == 2
    assert scorer.score(["CCC", "CCN"]) == [0.0, 0.03] and oracle.calls == ["CCO", "CCN"]
    with pytest.raises(ValueError, match="budget must be a positive number"):
        CachedScorer(oracle, budget=0)


def _killed_run(path, batches: list[list[str]]) -> list[OracleCall]:
    """Score `batches` with a journal at `path` (a run that is then killed); returns its history."""
    scorer = CachedScorer(CountingOracle())
    scorer.attach_journal(path, fresh=True)
    for batch in batches:
        scorer.score(batch)
    return list(scorer.history)


def test_a_resume_takes_the_journaled_calls_beyond_its_checkpoint_without_paying_again(tmp_path) -> None:
    journal = tmp_path / "oracle_calls.jsonl"
    batches = [["CCO", "CCN"], ["CCC", "CCO"], ["CCCC", "c1ccccc1"]]
    uninterrupted = _killed_run(tmp_path / "whole.jsonl", batches)
    _killed_run(journal, batches[:2])  # killed after its second batch; its checkpoint holds the first only
    checkpoint = CachedScorer(CountingOracle())
    checkpoint.score(batches[0])
    resumed = CachedScorer(oracle := CountingOracle())
    resumed.attach_journal(journal, fresh=False)
    resumed.load_state_dict(checkpoint.state_dict())
    for batch in batches[1:]:
        resumed.score(batch)
    assert oracle.calls == ["CCCC", "c1ccccc1"]  # CCC was paid by the killed run: taken from its journal
    assert resumed.history == uninterrupted
    from divrl.tasks.molecules.scoring import read_history

    assert read_history(journal) == uninterrupted  # the journal is the run's real spending, in order


def test_a_resume_that_diverges_still_counts_what_the_killed_run_paid(tmp_path, caplog) -> None:
    journal = tmp_path / "oracle_calls.jsonl"
    _killed_run(journal, [["CCO"], ["CCN", "CCC"]])
    resumed = CachedScorer(oracle := CountingOracle(), budget=4)
    resumed.attach_journal(journal, fresh=False)
    resumed.load_state_dict({"history": [["CCO", 0.03]], "hits": 0, "misses": 1})
    with caplog.at_level(logging.WARNING):
        assert resumed.score(["CCCC", "CCCCC"]) == [0.04, 0.0]  # CCN, CCC adopted first: one call left
    assert "did not ask again for 2 molecule(s)" in caplog.text
    assert oracle.calls == ["CCCC"] and resumed.oracle_calls == 4 and resumed.over_budget == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # a population restores its snapshot: the adopted calls are prepaid again
        resumed.load_state_dict({"history": [["CCO", 0.03]], "hits": 0, "misses": 1})
        resumed.score(["CCCCC"])
    assert "killed run" not in caplog.text and resumed.oracle_calls == 4  # named once; counted once


def test_a_snapshot_restored_after_real_calls_keeps_the_journal_and_prepays_them(tmp_path, caplog) -> None:
    """A population's member scoring restores the task state taken before its real oracle calls: the run's own
    journal must still be accepted, and the calls it paid stay paid (prepaid, then counted)."""
    scorer = CachedScorer(oracle := CountingOracle(), budget=5)
    scorer.attach_journal(tmp_path / "oracle_calls.jsonl", fresh=True)
    scorer.score(["CCO"])
    snapshot = scorer.state_dict()
    scorer.score(["CCN", "CCC"])  # member scoring: real calls, journaled
    scorer.load_state_dict(snapshot)  # refused before the fix: "the journal belongs to another run"
    assert scorer.score(["CCN"]) == [0.03] and oracle.calls == ["CCO", "CCN", "CCC"]
    with caplog.at_level(logging.INFO):
        scorer.score(["CCCC"])  # a molecule never asked for: CCC, paid during scoring, joins the history first
    assert [call.smiles for call in scorer.history] == ["CCO", "CCN", "CCC", "CCCC"]
    assert "killed run" not in caplog.text  # this run paid for CCC itself: no resume warning
    assert "1 molecule(s) this run paid for before restoring an earlier state" in caplog.text


def test_a_journal_from_another_run_is_refused_by_name(tmp_path) -> None:
    journal = tmp_path / "oracle_calls.jsonl"
    _killed_run(journal, [["CCN"]])
    scorer = CachedScorer(CountingOracle())
    scorer.attach_journal(journal, fresh=False)
    with pytest.raises(ValueError, match=r"oracle_calls\.jsonl: the run's oracle call 1 \(CCO, 0\.03\) is not in"):
        scorer.load_state_dict({"history": [["CCO", 0.03]], "hits": 0, "misses": 1})


def test_a_fresh_run_rewrites_the_journal(tmp_path) -> None:
    journal = tmp_path / "oracle_calls.jsonl"
    _killed_run(journal, [["CCN"]])
    assert _killed_run(journal, [["CCO"]]) == [OracleCall("CCO", 0.03)]
    assert journal.read_text().count("\n") == 1


@pytest.mark.parametrize(("line", "message"), [
    ('{"smiles": "not a molecule", "score": 0.5}', "'not a molecule' is not a valid SMILES"),
    ('{"smiles": "CCO", "score": NaN}', "score nan is not a finite number"),
    ('{"smiles": "CCO", "score": Infinity}', "score inf is not a finite number"),
    ('{"smiles": "CCO", "score": "0.5"}', "score '0.5' is not a finite number"),
    ('{"smiles": "OCC", "score": 0.7}', "CCO scored 0.7, but 0.5 on line 1"),
])
def test_oracle_history_input_is_canonicalised_and_checked_line_by_line(tmp_path, line: str, message: str) -> None:
    from divrl.tasks.molecules.scoring import read_history

    path = tmp_path / "calls.jsonl"
    path.write_text('{"smiles": "OCC", "score": 0.5}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"calls\.jsonl:2: {__import__('re').escape(message)}"):
        read_history(path)
    path.write_text('{"smiles": "OCC", "score": 0.5}\n')
    assert read_history(path) == [OracleCall("CCO", 0.5)]  # canonical: a later "CCO" is a cache hit


def test_oracle_history_that_is_not_utf8_names_the_file(tmp_path) -> None:
    from divrl.tasks.molecules.scoring import read_history

    path = tmp_path / "calls.jsonl"
    path.write_bytes(b'{"smiles": "CCO", "score": 0.5}\n{"smiles": "\xff"}\n')
    with pytest.raises(ValueError, match=r"calls\.jsonl: not UTF-8 text"):
        read_history(path)
