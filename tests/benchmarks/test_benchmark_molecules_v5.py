"""Evidence v5's runner (benchmarks/molecules_v5.py) without a campaign: the 75 units and their lanes, the measures on
made-up histories, the refusal of test-only flags, and the report on made-up unit folders."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import molecules_v5 as v5  # noqa: E402

from divrl.task import JOURNAL_FILE  # noqa: E402
from divrl.tasks.molecules.metrics import auc_top_k  # noqa: E402
from divrl.tasks.molecules.scoring import write_history  # noqa: E402

ORACLES = ["ranolazine_mpo", "celecoxib_rediscovery"]
# Ten distinct drug-like molecules (the shipped WEHI set), each passing the chemistry gate.
MOLECULES = ["CC(=O)Oc1ccccc1C(=O)O", "Cn1c(=O)c2c(ncn2C)n(C)c1=O", "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
             "CN1CCC[C@H]1c1cccnc1", "O=C(O)c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "c1ccc2ccccc2c1",
             "CCN(CC)CC(=O)Nc1c(C)cccc1C", "COc1ccc2[nH]cc(CCNC(C)=O)c2c1", "CC1=CC(=O)c2ccccc2C1=O"]
TAU1, TAU2 = 0.5, 0.8
CAMPAIGN = "9b27fc69e64d718354d92808452c2dc39a6bd84c"  # the commit the made-up decisions.md records


def test_the_75_units_come_seed_by_seed_dealt_alternately_to_two_lanes() -> None:
    units = v5.campaign_units(ORACLES)
    assert len(units) == 75 and len(set(units)) == 75
    seeds = [seed for _, _, seed in units]
    assert seeds == sorted(seeds) and seeds.count(0) == 17 and seeds.count(4) == 12  # seed-major
    main = [u for u in units if v5.ARMS[u[1]].number <= 6]
    extra = [u for u in units if v5.ARMS[u[1]].number >= 7]
    assert len(main) == 60 and {(o, s) for o, _, s in main} == {(o, s) for o in ORACLES for s in range(5)}
    assert len(extra) == 15 and {(o, s) for o, _, s in extra} == {(ORACLES[0], s) for s in range(3)}
    assert units[:3] == [(ORACLES[0], "prior", 0), (ORACLES[1], "prior", 0), (ORACLES[0], "reinvent-replay", 0)]
    lanes = [v5.lane_units(ORACLES, lane) for lane in (0, 1)]
    assert (len(lanes[0]), len(lanes[1])) == (38, 37)
    assert [u for pair in zip(*lanes) for u in pair] + lanes[0][37:] == units  # dealt alternately
    with pytest.raises(SystemExit, match="two lanes"):
        v5.lane_units(ORACLES, 2)


def test_the_measures_count_gated_novel_hits_and_hold_auc_to_b() -> None:
    history = [(s, 0.9 if i < 3 else 0.6 if i < 6 else 0.1) for i, s in enumerate(MOLECULES)]
    history.insert(1, ("CO", 0.95))  # methanol: scores, but the gate rejects it: no hit
    measures = v5.unit_measures(history, budget=12, tau1=TAU1, tau2=TAU2, novel_against={MOLECULES[0]})
    assert (measures["calls"], measures["gate_rejected_above_tau1"]) == (11, 1)
    assert (measures["yield_tau1"], measures["yield_tau2"]) == (6, 3)
    assert (measures["novel_yield_tau1"], measures["novel_yield_tau2"]) == (5, 2)  # MOSES holds MOLECULES[0]
    assert (measures["ob100_tau1"], measures["ob100_tau1_reached"]) == (13, False)  # not reached: B + 1
    assert 1 <= measures["circles_tau2"] <= measures["circles_tau1"] <= 6
    assert 1 <= measures["scaffolds_tau1"] <= 6 and 0 < measures["intdiv_tau1"] <= 1
    top10 = sorted((v for _, v in history), reverse=True)[:10]
    mean = sum(top10) / 10  # one sample at the last call (11 < 100), then held from call 11 to B = 12
    assert measures["auc_top10"] == pytest.approx((11 * mean / 2 + mean) / 12)
    assert measures["auc_top10"] == pytest.approx(auc_top_k(history, 12))  # PMO's scores: the gate plays no part
    assert measures["curves"] == {"calls": [11], "yield_tau1": [6], "novel_yield_tau1": [5], "circles_tau1":
                                  [measures["circles_tau1"]], "yield_tau2": [3], "novel_yield_tau2": [2],
                                  "circles_tau2": [measures["circles_tau2"]]}
    assert v5.unit_measures(history, budget=3, tau1=TAU1, tau2=TAU2, novel_against=set())["yield_tau1"] == 2


def test_curves_are_read_every_100_calls_and_at_the_last() -> None:
    assert v5.curve_points(250) == [100, 200, 250] and v5.curve_points(200) == [100, 200]
    assert v5.curve_points(0) == [] and v5.round_up(0.2501) == 0.26 and v5.round_up(0.25) == 0.25


def _pilot(state: Path, **extra: object) -> None:
    oracles = {o: {"tau1": TAU1, "tau2": TAU2, "p99": 0.45, "p99.9": 0.75, "seconds_per_molecule": 0.001,
                   "fast_enough": True} for o in ORACLES}
    (state / "pilots").mkdir(parents=True, exist_ok=True)
    (state / "pilots" / "tau.json").write_text(json.dumps({"samples": 10_000, "chosen": ORACLES, "oracles": oracles,
                                                           **extra}))
    (state / "decisions.md").write_text(f"Campaign commit: `bf1e0a3`\n\nLater: Campaign commit: `{CAMPAIGN[:7]}`\n")


def test_test_only_flags_are_refused_without_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    state = ["--state", str(tmp_path / "state"), "--work", str(tmp_path / "work")]
    with pytest.raises(SystemExit, match=r"--budget 64, --max-steps 2 departs from the protocol; pass --test"):
        v5.main(["unit", ORACLES[0], "grpo-filter", "0", "--budget", "64", "--max-steps", "2", *state])
    with pytest.raises(SystemExit, match=r"--samples 64 departs from the protocol"):
        v5.main(["pilot-tau", "--samples", "64", *state])
    with pytest.raises(SystemExit, match="run `pilot-tau` first"):  # --test lets the flags through
        v5.main(["unit", ORACLES[0], "grpo-filter", "0", "--budget", "64", "--test", *state])
    _pilot(tmp_path / "state", test=True, deviations={"samples": 64})
    with pytest.raises(SystemExit, match="is a test pilot"):
        v5.main(["unit", ORACLES[0], "grpo-filter", "0", *state])
    with pytest.raises(SystemExit, match="not one of the protocol's 75 units"):
        v5.main(["unit", ORACLES[1], "qd-filter", "0", "--test", "--budget", "64", *state])


def _land(state: Path, oracle: str, arm: str, seed: int, hits: int, **extra: object) -> None:
    """A landed unit of 10 calls whose first `hits` score above tau2, run from the campaign commit, with a logged run
    for the RL arms whose shaped `reward` is 64 times its task reward (as IPS logs it)."""
    folder = v5.unit_dir(state, (oracle, arm, seed))
    folder.mkdir(parents=True)
    history = [(s, 0.9 if i < hits else 0.1) for i, s in enumerate(MOLECULES)]
    write_history(folder / JOURNAL_FILE, history)
    measures = v5.unit_measures(history, 10, TAU1, TAU2, novel_against=set(MOLECULES[:1]))
    (folder / "metrics.json").write_text(json.dumps({"oracle": oracle, "arm": arm, "seed": seed, "budget": 10,
                                                      "tau1": TAU1, "tau2": TAU2, "stopped_short": False,
                                                      "commit": CAMPAIGN, "commit_clean": True, **measures, **extra}))
    if arm != "prior":
        task = [0.2 + 0.1 * i - 0.01 * i * i + 0.01 * seed for i in range(1, 7)]
        log = [{"step": i, "reward": 64 * r, "divrl/task_reward": r, "diversity/pairwise": 0.9 - 0.1 * i}
               for i, r in enumerate(task, start=1)]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": log}))


def test_the_report_reads_a_partial_campaign_from_its_files(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _pilot(state)
    for seed, (prior, reinvent, ips, grpo) in enumerate([(1, 2, 6, 4), (2, 3, 7, 5), (1, 2, 8, 4)]):
        for arm, hits in (("prior", prior), ("reinvent-replay", reinvent), ("ips-replay", ips), ("grpo-filter", grpo)):
            _land(state, ORACLES[0], arm, seed, hits)
    _land(state, ORACLES[1], "ips-replay", 0, 3, test=True, deviations={"budget": 10})
    _land(state, ORACLES[1], "qd-filter", 0, 3)  # arms 7-11 run on the first oracle only
    _land(state, ORACLES[1], "grpo", 1, 3, commit="bf1e0a3a2ebe521fb61a6d3bc4b71dbc47a75a14")
    _land(state, ORACLES[1], "grpo", 2, 3, commit_clean=False)
    result = v5.write_report(state, tmp_path / "results", bootstrap=20)
    assert len(result["missing"]) == 75 - 12 and result["left_out"] == [
        f"units/{ORACLES[1]}/grpo/seed1 (ran from bf1e0a3, not the campaign commit 9b27fc6)",
        f"units/{ORACLES[1]}/grpo/seed2 (ran from a checkout with changed tracked files)",
        f"units/{ORACLES[1]}/ips-replay/seed0 (a test unit)",
        f"units/{ORACLES[1]}/qd-filter/seed0 (not one of the protocol's units)"]
    first = result["oracles"][ORACLES[0]]
    claim = first["claim"]["tau2"]
    assert claim["yield"]["mean"] == pytest.approx(14 / 3) and claim["yield"]["ci_low"] > 0
    assert claim["ob"]["mean"] == 0 and claim["reproduced"] is False  # neither reached 100 hits: OB not lower
    assert first["anchor"]["within"] is False  # AUC top-10 of 10 calls is nowhere near PMO's 0.760
    assert first["beat_prior"] == ["reinvent-replay", "ips-replay", "grpo-filter"]
    verdicts = {arm: {ref: {m: s["verdict"] for m, s in stats.items()} for ref, stats in refs.items()}
                for arm, refs in first["verdicts"].items()}
    assert verdicts["ips-replay"]["grpo-filter"] == dict.fromkeys(v5.VERDICT_MEASURES, "no difference")
    assert verdicts["reinvent-replay"]["grpo-filter"] == dict.fromkeys(v5.VERDICT_MEASURES, "worse")
    assert verdicts["grpo-filter"] == {"prior": dict.fromkeys(v5.VERDICT_MEASURES, "better")}  # not against itself
    assert first["law"]["arms"]["ips-replay"]["points"] == 18 and first["law"]["pooled"]["points"] == 54
    assert 0 < first["law"]["pooled"]["b"] < 1  # the task reward's scale, not the shaped reward's 64x
    assert result["oracles"][ORACLES[1]]["anchor"]["within"] is None  # nothing landed there
    text = (tmp_path / "results" / "molecules_v5.md").read_text()
    assert text.index("Sanity first") < text.index("The paper's claim") < text.index("divrl's question")
    assert "**Campaign incomplete**: 63 units missing" in text and "**NOT within** 0.15" in text
    assert f"| {ORACLES[0]} | tau2 | +4.67 [" in text and "| NOT reproduced |" in text
    assert first["equal_calls"] == {} and "Every unit compared reached B" in text and "Units of " not in text
    assert (tmp_path / "results" / "molecules_v5_yield.png").stat().st_size > 0
    assert json.loads((tmp_path / "results" / "molecules_v5.json").read_text())["missing"][0] == [
        ORACLES[1], "prior", 0]


def _curved(calls: list[int], novel: list[int], circles: list[int], budget: int = 400) -> dict[str, object]:
    """A unit's metrics as far as the comparison at equal calls reads them."""
    return {"budget": budget, "calls": calls[-1],
            "curves": {"calls": calls, "novel_yield_tau1": novel, "circles_tau1": circles}}


def test_arms_compare_at_the_most_calls_every_paired_unit_reached() -> None:
    arms = {"grpo": {0: _curved([100, 200, 250], [1, 2, 2], [1, 1, 1]),  # stopped short at 250 calls
                     1: _curved([100, 200, 300, 400], [2, 3, 9, 9], [1, 2, 3, 3]),
                     2: _curved([100, 200, 300, 400], [0, 9, 9, 9], [0, 1, 1, 1])},  # seed 2 has no partner
            "prior": {0: _curved([100, 200, 300, 400], [0, 0, 1, 1], [0, 0, 1, 1]),
                      1: _curved([100, 200, 300, 400], [1, 1, 1, 2], [1, 1, 1, 2])}}
    stats = v5.at_equal_calls(arms, "grpo", "prior")
    assert stats is not None and stats["calls"] == 200  # not 250: the other units have no point there
    assert stats["novel_yield_tau1"]["mean"] == pytest.approx(2) and stats["novel_yield_tau1"]["seeds"] == [0, 1]
    assert stats["circles_tau1"]["mean"] == pytest.approx(1) and stats["circles_tau1"]["verdict"] == "better"
    arms["grpo"][0] = _curved([100, 200, 300, 400], [1, 2, 2, 2], [1, 1, 1, 1])
    assert v5.at_equal_calls(arms, "grpo", "prior") is None  # every paired unit reached B: the verdicts at B hold


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["prior", "grpo-filter", "fkl-filter"])
def test_a_unit_runs_end_to_end_on_the_shipped_prior(arm: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`unit` as the campaign runs it (for the RL arm, `divrl train` in a subprocess) to a test budget of 64 calls and
    2 steps; a second run finds it finished."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(v5, "moses_train", lambda: frozenset(MOLECULES))
    state = tmp_path / "state"
    _pilot(state, test=True, deviations={"samples": 64})
    budget = 320 if arm == "fkl-filter" else 64  # arm 11's rehearsal set opens its history with ~240 calls
    args = ["unit", ORACLES[0], arm, "0", "--test", "--budget", str(budget), "--max-steps", "2", "--state", str(state),
            "--work", str(tmp_path / "work")]
    assert v5.main(args) == 0
    folder = v5.unit_dir(state, (ORACLES[0], arm, 0))
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["test"] and metrics["deviations"] == {"budget": budget, "max_steps": 2}
    assert 0 < metrics["calls"] <= budget and 1 <= metrics["steps"] <= 2 and len(metrics["commit"]) == 40
    assert metrics["stopped_short"] == (metrics["calls"] < budget) and metrics["journal_calls"] == metrics["calls"]
    assert len((folder / JOURNAL_FILE).read_text().splitlines()) == metrics["calls"]
    assert (folder / "trainer_state.json").is_file() == (arm != "prior")
    if arm != "prior":
        assert "diversity_filter={scaffold: murcko, bucket_size: 10, min_score: 0.5}" in metrics["command"]
    if arm == "fkl-filter":  # the rehearsal set's calls open the history and count towards the budget
        rehearsal = tmp_path / "work" / ORACLES[0] / arm / "seed0-rehearsal" / "history.jsonl"
        opening = rehearsal.read_text().splitlines()
        assert 100 < len(opening) < metrics["calls"] and "--divergence_estimator" in metrics["command"]
        assert (folder / JOURNAL_FILE).read_text().splitlines()[: len(opening)] == opening
    assert v5.run_unit(state, tmp_path / "work", (ORACLES[0], arm, 0)) is None  # finished: skipped
    journal = (folder / JOURNAL_FILE).read_text()
    (folder / "metrics.json").unlink()  # killed after training, before its measures: the rerun resumes
    assert v5.main(args) == 0
    again = json.loads((folder / "metrics.json").read_text())
    assert again["resumed"] and (folder / JOURNAL_FILE).read_text() == journal  # nothing paid twice
    assert {k: again[k] for k in ("calls", "yield_tau1", "auc_top10")} == {k: metrics[k] for k in
                                                                           ("calls", "yield_tau1", "auc_top10")}


@pytest.mark.slow
def test_the_tau_pilot_records_percentiles_rounded_up_and_replaces_a_slow_oracle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock times the oracles: the first-ranked one takes 1 s for the pilot's molecules (too slow), the rest
    a microsecond each, so the rule's choice is tested without reading this machine's speed."""
    readings = iter([0.0, 1.0])
    clock = {"now": 1.0}

    def perf_counter() -> float:
        reading = next(readings, None)
        if reading is None:
            clock["now"] += 1e-6
            reading = clock["now"]
        return reading

    monkeypatch.setattr(v5, "time", SimpleNamespace(time=time.time, perf_counter=perf_counter))
    monkeypatch.chdir(tmp_path)
    state = ["--state", str(tmp_path / "state")]
    assert v5.main(["pilot-tau", "--samples", "64", "--test", *state]) == 0
    pilot = json.loads((tmp_path / "state" / "pilots" / "tau.json").read_text())
    ranked = list(v5.RANKED_ORACLES)
    assert pilot["chosen"] == ranked[1:3] and sorted(pilot["oracles"]) == sorted(ranked[:3])
    assert pilot["test"] and pilot["deviations"] == {"samples": 64}
    for name, row in pilot["oracles"].items():
        assert row["tau1"] == v5.round_up(row["p99"]) >= row["p99"] and row["tau2"] == v5.round_up(row["p99.9"])
        assert row["fast_enough"] == (name != ranked[0]) == (row["seconds_per_molecule"] < v5.ORACLE_SECONDS)
    assert 0 < pilot["distinct_valid"] <= 64 and pilot["max_tokens"] == 100
    with pytest.raises(SystemExit, match="holds a test pilot"):
        v5.main(["pilot-tau", *state])


def test_every_file_a_unit_keeps_escapes_the_ignore_rules() -> None:
    """The protocol commits each unit's journal with it: v5's first units landed without theirs, ignored by git."""
    repo = Path(__file__).resolve().parents[2]
    folder = v5.unit_dir(repo / "benchmarks" / "evidence" / "molecules_v5", (ORACLES[0], "grpo-filter", 0))
    for name in (JOURNAL_FILE, "trainer_state.json", "metrics.json", "first-run-metrics.json"):
        path = (folder / name).relative_to(repo)
        ignored = subprocess.run(["git", "check-ignore", "--no-index", "-q", str(path)], cwd=repo, check=False)
        assert ignored.returncode == 1, f"{path} is ignored by git: a unit would land without it"


def test_the_report_names_the_calls_of_a_unit_that_stopped_short(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _pilot(state)
    for seed in (0, 1):
        _land(state, ORACLES[0], "prior", seed, 2)
        _land(state, ORACLES[0], "grpo", seed, 4, **({"stopped_short": True, "calls": 5787} if seed else {}))
    result = v5.write_report(state, tmp_path / "results", bootstrap=20)
    assert result["oracles"][ORACLES[0]]["arms"]["grpo"]["stopped_short_calls"] == [5787]
    text = (tmp_path / "results" / "molecules_v5.md").read_text()
    assert f"| {ORACLES[0]} | 6 grpo | 2 | 1 (5,787 calls) |" in text and f"| {ORACLES[0]} | 1 prior | 2 | 0 |" in text
    assert f"Units of {ORACLES[0]} grpo stopped short of B" in text


def test_the_report_needs_the_campaign_commit_recorded(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _pilot(state)
    (state / "decisions.md").write_text("no commit yet\n")
    with pytest.raises(SystemExit, match="no line 'Campaign commit"):
        v5.write_report(state, tmp_path / "results", bootstrap=20)
