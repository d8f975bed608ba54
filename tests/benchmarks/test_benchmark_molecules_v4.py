"""Evidence v4's measures and report (benchmarks/molecules_v4.py, molecules_v4_report.py) on made-up histories: the
budget cut, Yield and Oracle Burden, the pairing by seed, the target verdict and the law fits."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import molecules_v4 as v4  # noqa: E402
import molecules_v4_report as report  # noqa: E402

from divrl.tasks.molecules.scoring import write_history  # noqa: E402

# Ten distinct drug-like molecules (the shipped WEHI set), for histories with real fingerprints.
MOLECULES = ["CC(=O)Oc1ccccc1C(=O)O", "Cn1c(=O)c2c(ncn2C)n(C)c1=O", "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
             "CN1CCC[C@H]1c1cccnc1", "O=C(O)c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "c1ccc2ccccc2c1",
             "CCN(CC)CC(=O)Nc1c(C)cccc1C", "COc1ccc2[nH]cc(CCNC(C)=O)c2c1", "CC1=CC(=O)c2ccccc2C1=O"]


def test_budget_measures_read_only_the_first_b_calls() -> None:
    history = [(s, 0.9 if i % 2 == 0 else 0.5) for i, s in enumerate(MOLECULES)]
    full = v4.budget_measures(history, budget=10, tau=0.8)
    cut = v4.budget_measures(history, budget=4, tau=0.8)
    assert (full["calls"], full["yield"], cut["calls"], cut["yield"]) == (10, 5, 4, 2)
    assert full["oracle_burden"] is None  # 100 hits are never reached
    assert 1 <= full["circles"] <= 5 and 0 < full["intdiv"] <= 1
    assert v4.budget_measures(history, budget=10, tau=0.95)["yield"] == 0


def _unit(state: Path, arm: str, seed: int, hits: int, calls: int = 10) -> None:
    """A landed unit whose first `hits` calls score above tau; an IPS run logs its shaped `reward` at 8 times its task
    reward, as v4's IPS runs did."""
    folder = state / "units" / f"{arm}-seed{seed}"
    folder.mkdir(parents=True)
    history = [(s, 0.9 if i < hits else 0.1) for i, s in enumerate(MOLECULES[:calls])]
    write_history(folder / "history.jsonl", history)
    measures = v4.budget_measures(history, 10, 0.8)
    fresh = {"samples": 8, "validity": 0.5, "mean_mpo_valid": 0.7, "uniqueness": 1.0, "circles_above_tau": 1}
    (folder / "metrics.json").write_text(json.dumps({"arm": arm, "seed": seed, "B": 10, "tau": 0.8, **measures,
                                                      "stopped_short": calls < 10, "fresh": fresh}))
    if arm != "sample":
        scale = 8 if arm.startswith("ips") else 1
        log = [{"step": i, "reward": scale * r, "divrl/task_reward": r, "diversity/pairwise": 0.9 - 0.1 * i}
               for i, r in enumerate((0.2 + 0.1 * i - 0.01 * i * i for i in range(1, 7)), start=1)]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": log}))


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    (state / "pilots").mkdir(parents=True)
    (state / "pilots" / "warm_start.json").write_text(json.dumps({"K": 32, "tau": 0.8}))
    (state / "pilots" / "budget.json").write_text(json.dumps({"B": 10, "S_max": 20}))
    return state


def test_report_pairs_by_seed_and_gives_the_verdict(state: Path, tmp_path: Path) -> None:
    for seed, (sample, grpo, ips) in enumerate([(2, 3, 6), (1, 2, 7), (2, 4, 8)]):
        _unit(state, "sample", seed, sample)
        _unit(state, "grpo", seed, grpo)
        _unit(state, "ips", seed, ips, calls=10 if seed else 8)
    result = report.write_report(state, tmp_path / "results")
    assert [(r["arm"], r["reference"]) for r in result["paired"]] == [("grpo", "sample"), ("ips", "grpo"),
                                                                        ("ips", "sample")]  # each pair once
    ips_grpo = next(r for r in result["paired"] if (r["arm"], r["reference"]) == ("ips", "grpo"))
    assert ips_grpo["yield"]["mean"] == pytest.approx(4.0) and ips_grpo["yield"]["n"] == 3
    assert ips_grpo["yield"]["ci_low"] > 0
    verdict = result["verdicts"]["ips"]
    assert verdict["seeds"] == 3 and not verdict["final"]
    assert verdict["reached"] is (verdict["checks"]["circles not below grpo"]["ci_high"] >= 0)
    assert result["verdicts"]["ips+df"]["reached"] is None  # no filter arm landed: not decidable
    text = (tmp_path / "results" / "molecules_v4.md").read_text()
    assert "provisional: 3 of 5 seeds" in text and "(stopped short)" in text
    assert (tmp_path / "results" / "molecules_v4_yield.png").stat().st_size > 0
    assert result["law"]["arms"]["grpo"]["pooled"]["points"] == 18  # 3 seeds x 6 logged steps
    # the task reward is one curve for every arm: one law fits them all; the shaped reward splits IPS off
    assert result["law"]["all_arms"]["r2"] > 0.95
    assert result["corrections"]["law_first_report"]["all_arms"]["r2"] < 0.5
    assert "the first report fitted the logged `reward`" in text
    ips = result["arms"]["ips"]  # hits 6, 7, 8 (seed 0 stopped short after 8 calls)
    assert ips["yield"]["mean"] == pytest.approx(7.0) and ips["yield"]["ci_low"] < 7.0 < ips["yield"]["ci_high"]
    assert (ips["stopped_short"], ips["seeds"], ips["oracle_burden"]["n"]) == (1, [0, 1, 2], 0)
    assert "| ips | 3 | 7 [" in text and "| 1 of 3 |" in text


def test_a_yield_below_grpo_is_a_miss(state: Path, tmp_path: Path) -> None:
    for seed, (grpo, ips) in enumerate([(6, 2), (7, 3), (8, 2)]):
        _unit(state, "sample", seed, 1)
        _unit(state, "grpo", seed, grpo)
        _unit(state, "ips", seed, ips)
    assert report.write_report(state, tmp_path / "results")["verdicts"]["ips"]["reached"] is False


def test_oracle_burden_has_no_interval_when_a_seed_never_reached_100() -> None:
    """The protocol: "not reached: reported as > B, and the interval is then not computed"; the interval over the
    seeds that did reach is kept apart, as the deviation v4's first report made."""
    full = report.burden_interval([100, 200])
    assert (full["mean"], full["not_reached"]) == (150, 0)
    short = report.burden_interval([100, None, 200])
    assert (short["n"], short["not_reached"], short["reached_seeds_only"]["mean"]) == (0, 1, 150)
    assert report._burden(short, 3).startswith("> B on 1 of 3 seeds: no interval (protocol); deviation")


def test_an_interval_writes_thousands_as_whole_numbers_and_the_rest_to_three_digits() -> None:
    level = {"mean": 3903.4, "ci_low": 3512.0, "ci_high": 4294.8, "n": 5}
    assert report._interval(level, difference=False) == "3,903 [3,512, 4,295]"
    assert report._interval({"mean": 1570.0, "ci_low": -12.34, "ci_high": 0.4567, "n": 2}) == \
        "+1,570 [-12.3, +0.457] (2 seeds)"


def test_circles_in_call_order_is_the_protocols_count_in_another_order() -> None:
    from divrl.tasks.molecules.metrics import circles

    assert report.circles_in_order(sorted(MOLECULES)) == circles(MOLECULES)
    assert report.circles_in_order(MOLECULES + MOLECULES[:3]) == report.circles_in_order(MOLECULES)  # repeats once


def test_corrections_read_the_committed_histories(state: Path, tmp_path: Path) -> None:
    for seed, (sample, grpo) in enumerate([(9, 3), (8, 2), (9, 4)]):
        _unit(state, "sample", seed, sample)
        _unit(state, "grpo", seed, grpo, calls=10 if seed else 7)
    fix = report.write_report(state, tmp_path / "results")["corrections"]
    assert (fix["stopped_short"], fix["runs"], fix["history_commits"]) == (1, 6, None)  # not a git checkout
    for arm, seeds in fix["units"].items():
        for seed, unit in seeds.items():
            metrics = json.loads((state / "units" / f"{arm}-seed{seed}" / "metrics.json").read_text())
            assert unit["reproduces_metrics"] and unit["novel_yield"] + unit["sft_copies"] == metrics["yield"]
            assert 1 <= unit["murcko_scaffolds"] <= metrics["yield"]
    (row,) = fix["equal_calls"]  # grpo seed 0 made 7 calls: every run is read over its first 7
    assert (row["arm"], row["reference"], row["C"], row["yield"]["n"]) == ("grpo", "sample", 7, 3)
    assert row["yield"]["mean"] == pytest.approx(((3 - 7) + (2 - 7) + (4 - 7)) / 3)
    assert fix["sft_data"]["nci_or_wehi"] + fix["sft_data"]["only_chembl"] == fix["sft_data"]["size"]
    text = (tmp_path / "results" / "molecules_v4.md").read_text()
    assert "### Corrections (issue 58" in text and "| grpo - sample | 7 | -4 [" in text
    assert "> B on 3 of 3 seeds: no interval (protocol) |" in text


@pytest.mark.slow
def test_units_run_end_to_end_on_a_tiny_model(tiny_qwen3: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The campaign's own code paths (sampling arm, an RL arm with the diversity filter, the fkl arm's rehearsal
    set and history hand-over), in process on the tiny model with scripted molecules, to a budget of 6 calls."""
    from transformers import AutoTokenizer

    from divrl.cli import main as divrl_main
    from divrl.testing import scripted_generation

    state = tmp_path / "state"
    monkeypatch.setattr(v4, "STATE", state)
    monkeypatch.setattr(v4, "warm_start", lambda work, seed, settings: tiny_qwen3)
    monkeypatch.setattr(v4, "divrl", lambda *args: divrl_main(list(args)))  # in process: the script applies
    monkeypatch.setattr(v4, "MAX_NEW_TOKENS", 40)
    monkeypatch.setattr(v4, "EVAL_SAMPLES", 32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    config = {"K": 16, "tau": 0.5, "B": 6, "S_max": 3}
    with scripted_generation(tokenizer, lambda prompt, row: " " + MOLECULES[row % len(MOLECULES)] + "\nSMILES:"):
        for arm in ("sample", "grpo+df", "fkl"):
            v4.run_unit(tmp_path / "work", arm, 0, config)
        (state / "pilots").mkdir(parents=True)
        (state / "pilots" / "warm_start.json").write_text(json.dumps({"K": 16, "tau": 0.5}))
        monkeypatch.setattr(v4, "BUDGET_PILOT_STEPS", 2)
        budget = v4.pilot_budget(tmp_path / "work")
    assert budget["steps"] == 2 and budget["calls"] >= 1 and budget["c0"] == budget["calls"] / 2
    assert budget["B"] in v4.BUDGETS and budget["S_max"] == math.ceil(2 * budget["B"] / budget["c0"])
    for arm in ("sample", "grpo+df", "fkl"):
        metrics = json.loads((state / "units" / f"{arm}-seed0" / "metrics.json").read_text())
        assert metrics["calls"] == 6 and not metrics["stopped_short"], arm  # the budget was reached and cut at B
        assert metrics["fresh"]["samples"] == 32 and metrics["fresh"]["validity"] > 0
        history = (state / "units" / f"{arm}-seed0" / "history.jsonl").read_text().splitlines()
        assert len(history) >= 6
    rehearsal = (tmp_path / "work" / "rehearsal" / "seed0" / "history.jsonl").read_text().splitlines()
    fkl = (state / "units" / "fkl-seed0" / "history.jsonl").read_text().splitlines()
    assert fkl[: len(rehearsal)] == rehearsal  # the rehearsal's calls open the arm's history
    grpo = json.loads((state / "units" / "grpo+df-seed0" / "metrics.json").read_text())
    assert 1 <= grpo["steps"] <= 3 and (state / "units" / "grpo+df-seed0" / "trainer_state.json").is_file()


def test_the_pilots_fragment_says_what_each_pilot_fixed(state: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(v4, "STATE", state)
    candidate = {"validity": 0.4, "uniqueness": 0.9, "mean_mpo_valid": 0.7, "mpo_percentiles_50_90_99": [0.7, 0.8, 0.9],
                 "fraction_above_tau": 0.3, "circles_above_tau": 5}
    (state / "pilots" / "warm_start.json").write_text(json.dumps(
        {"candidates": {"16": candidate, "32": {**candidate, "validity": 0.0, "mean_mpo_valid": None,
                                                 "mpo_percentiles_50_90_99": None}}, "K": 16, "in_band": True,
         "tau": 0.8}))
    (state / "pilots" / "budget.json").write_text(json.dumps(
        {"B": 2048, "S_max": 200, "steps": 20, "calls": 400, "c0": 20.0, "t0_seconds": 30.0,
         "B_fits_45_minutes": True, "minutes_per_unit_at_B": 51.2}))
    v4.write_pilots_markdown(tmp_path)
    text = (tmp_path / "molecules_v4_pilots.md").read_text()
    assert "**K = 16** (validity nearest 0.5; inside [0.35, 0.65]); **tau = 0.8**" in text
    assert "| 32 | 0.000 | 0.900 | - | - |" in text and "**B = 2048** calls (fits 45 minutes" in text
