"""benchmarks/campaigns/demo_molecule_seeds.py's bookkeeping on made-up seed records (no training): resuming from a
seed's file, the intervals and paired differences, the refusal of records of other settings, and the demo report's
reading of the committed result."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "campaigns"))

import demo_molecule_seeds as bench  # noqa: E402

from divrl.tasks.molecules import clm_demo  # noqa: E402

YIELDS = {0: {"sample": 1, "grpo": 3, "ips": 3}, 1: {"sample": 2, "grpo": 5, "ips": 4},
          2: {"sample": 1, "grpo": 2, "ips": 2}}


def _write_records(state: Path, settings: dict | None = None) -> None:
    state.mkdir(parents=True, exist_ok=True)
    for seed, yields in YIELDS.items():
        (state / f"seed{seed}.json").write_text(json.dumps({
            "seed": seed, "settings": settings or clm_demo.settings(), "commit": "abc1234", "torch_threads": 1,
            "seconds": 60.0, "yield": yields, "histories": {arm: [] for arm in yields}}))


def test_the_report_reads_the_seed_files_and_pairs_by_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_records(tmp_path / "state")
    monkeypatch.setattr(clm_demo, "run_seed", lambda *a, **k: pytest.fail("a seed with a file ran again"))
    monkeypatch.setattr(sys, "argv", ["demo_molecule_seeds.py", "--seeds", "0", "1", "2", "--report-only",
                                      "--state", str(tmp_path / "state"), "--results", str(tmp_path / "results")])
    bench.main()
    doc = json.loads((tmp_path / "results" / "demo_molecule_seeds.json").read_text())
    assert doc["seeds"] == [0, 1, 2] and doc["settings"] == clm_demo.settings()
    assert doc["arms"]["grpo"]["values"] == [3, 5, 2] and doc["arms"]["grpo"]["mean"] == pytest.approx(10 / 3)
    assert doc["paired"]["grpo - sample"]["values"] == [2, 3, 1]
    assert doc["paired"]["ips - grpo"]["values"] == [0, -1, 0]
    low, high = doc["paired"]["grpo - sample"]["ci_low"], doc["paired"]["grpo - sample"]["ci_high"]
    assert low < 2 < high and high - 2 == pytest.approx(2 - low)  # symmetric about the mean
    markdown = (tmp_path / "results" / "demo_molecule_seeds.md").read_text()
    assert "| grpo - sample (paired) | 2.00 [" in markdown and "| 1 to 3 | 2, 3, 1 |" in markdown


def test_seed_files_of_other_settings_are_refused_by_seed(tmp_path: Path) -> None:
    _write_records(tmp_path, settings={**clm_demo.settings(), "budget": 64})
    records = {seed: bench.run_seed(tmp_path, seed) for seed in YIELDS}
    with pytest.raises(SystemExit, match=r"seed\(s\) \[0, 1, 2\] ran with other settings"):
        bench.summarise(records)


def test_the_demo_reads_its_molecule_run_against_the_committed_result(tmp_path: Path) -> None:
    _write_records(tmp_path / "state")
    doc = {**bench.summarise({seed: bench.run_seed(tmp_path / "state", seed) for seed in YIELDS}),
           "commit": "abc1234", "date": "2026-12-02T00:00:00"}
    committed = tmp_path / "demo_molecule_seeds.json"
    committed.write_text(json.dumps(doc))
    yields = {"sample": [1, 2], "grpo": [4, 5], "ips": [4, 5]}  # a run of seeds 0 and 7
    lines = clm_demo.committed_lines(yields, [0, 7], committed)
    assert "of which 0 are among them" in lines[0]
    text = "\n".join(lines)
    assert "| grpo | 4.50 | 3.33 [" in text and "| 2 to 5 | seed 0: 3 (this run 4) |" in text
    assert any(line.startswith("| grpo - sample (paired by seed) | 3.00 | 2.00 [") and "seed 0: 2 (this run 3)" in line
               for line in lines)
    committed.write_text(json.dumps({**doc, "settings": {**doc["settings"], "tau": 0.5}}))
    assert "is for other settings" in clm_demo.committed_lines(yields, [0, 7], committed)[0]
    assert "No committed multi-seed result" in clm_demo.committed_lines(yields, [0, 7], tmp_path / "absent.json")[0]
    committed.write_text(json.dumps({key: value for key, value in doc.items() if key != "paired"}))
    assert "could not be read (KeyError('paired'))" in clm_demo.committed_lines(yields, [0, 7], committed)[0]
    committed.write_text("{not json")
    assert "could not be read" in clm_demo.committed_lines(yields, [0, 7], committed)[0]
