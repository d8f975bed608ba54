"""The real-model recovery benchmark: train and evaluation see the same task and split, and its statistics
(seeds pooled per instance, hierarchical bootstrap, paired differences to GRPO) are right."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "campaigns"))  # v3_pilots

import hypospace_recovery as bench  # noqa: E402

from divrl.core.estimators import uniform_coverage_ceiling  # noqa: E402


def _eval(records: dict[str, tuple[list[float], int]]) -> dict:
    """An evaluation entry: per instance id, its RR curve and |H_O| (validity, uniqueness derived from them; 20
    samples, so that validity x samples is a count)."""
    instances = [{"id": i, "n_admissible": size, "curve": curve, "recovery": curve[-1], "validity": curve[-1] / 2,
                  "uniqueness": curve[0], "proposals": ["OR(x,y)", None], "n_samples": 20}
                 for i, (curve, size) in records.items()]
    return {"instances": instances}


def test_pool_method_averages_seeds_within_instances() -> None:
    seed0 = _eval({"a": ([0.25, 0.5], 4), "b": ([0.0, 0.2], 10)})
    seed1 = _eval({"b": ([0.2, 0.6], 10), "a": ([0.25, 1.0], 4)})  # instance order does not matter
    draws = np.random.default_rng(0).integers(0, 2, (200, 2))
    pooled, samples = bench.pool_method("IPS", [seed0, seed1], draws)
    assert pooled["seeds"] == 2 and pooled["n_instances"] == 2 and samples["recovery"].shape == (200,)
    assert pooled["curve"]["mean"] == pytest.approx([(0.25 + 0.1) / 2, (0.75 + 0.4) / 2])
    assert pooled["validity"]["mean"] == pytest.approx((0.75 + 0.4) / 4)
    assert pooled["uniqueness"]["mean"] == pytest.approx((0.25 + 0.1) / 2)
    assert pooled["distinct_valid"]["mean"][-1] == pytest.approx((4 * 0.75 + 10 * 0.4) / 2)  # |H_O| per instance
    assert pooled["per_seed_recovery"] == pytest.approx([0.35, 0.8])


def test_intervals_cover_seed_variation() -> None:
    # Both instances give 0 under seed 0 and 1 under seed 1: resampling instances alone would see no spread.
    values = np.array([[0.0, 1.0], [0.0, 1.0]])
    draws = np.random.default_rng(0).integers(0, 2, (400, 2))
    means = bench.bootstrap_means(values, draws)
    assert set(np.round(means, 6)) == {0.0, 0.5, 1.0}


def test_differences_to_grpo_are_paired_on_instances() -> None:
    rng = np.random.default_rng(1)
    rr = rng.uniform(0, 0.8, size=12)  # instances differ a lot; IPS is GRPO + 0.1 on every one of them
    grpo = _eval({f"i{k}": ([r], 5) for k, r in enumerate(rr)})
    ips = _eval({f"i{k}": ([r + 0.1], 5) for k, r in enumerate(rr)})
    collected = {label: {"evals": [e], "eval_seeds": [0], "training": [], "runs": [], "wall_seconds": 0.0}
                 for label, e in (("GRPO", grpo), ("IPS-GRPO", ips))}
    methods = bench.compare(collected, resamples=300)
    difference = methods["IPS-GRPO"]["recovery_minus_grpo"]
    assert difference["mean"] == pytest.approx(0.1)
    assert difference["ci_low"] == pytest.approx(0.1) and difference["ci_high"] == pytest.approx(0.1)
    assert methods["IPS-GRPO"]["recovery"]["ci_high"] - methods["IPS-GRPO"]["recovery"]["ci_low"] > 0.1
    assert "recovery_minus_grpo" not in methods["GRPO"]


def test_plan_puts_the_multi_seed_comparison_first() -> None:
    protocol = bench.Protocol(methods=("qd", "grpo", "ips"), seeds=(0, 1))
    assert bench.plan(protocol) == [("grpo", 0), ("ips", 0), ("grpo", 1), ("ips", 1), ("qd", 0)]


def test_plan_runs_every_first_seed_then_the_priority_methods_later_seeds() -> None:
    protocol = bench.Protocol(methods=("grpo", "qd", "js", "maxent"), seeds=(0, 1, 2), all_seeds=True,
                              priority=("maxent",))
    assert bench.plan(protocol)[3:] == [("qd", 0), ("js", 0), ("maxent", 0), ("maxent", 1), ("maxent", 2),
                                        ("qd", 1), ("js", 1), ("qd", 2), ("js", 2)]
    assert sorted(bench.plan(protocol)) == sorted(bench.plan(bench.Protocol(
        methods=protocol.methods, seeds=protocol.seeds, all_seeds=True)))


@pytest.mark.parametrize("name", ["voxel", "boolean"])
def test_evaluation_uses_the_training_task_and_its_held_out_split(name: str, tmp_path: Path) -> None:
    from divrl.task import build_task
    from divrl.tasks.hypospace import recovery_cli
    from divrl.tasks.hypospace.cli import task_from_args
    from divrl.train import parse_recipe, task_args_with_overrides

    setting = bench.TASKS[name]
    script, _, _ = parse_recipe(["--config", str(bench.RECIPES / setting.task / "ips.yaml"), *setting.train_args,
                                 "--output_dir", str(tmp_path)])
    train_task = build_task(script.task, **task_args_with_overrides(script))
    train_ids = set(train_task.train_dataset(split="train", style="base", seed=script.split_seed,
                                             limit=script.instance_limit, n_exemplars=script.n_exemplars)["id"])

    parser = argparse.ArgumentParser()
    recovery_cli.register(parser.add_subparsers())
    args = parser.parse_args(["recovery", "--model", "m", "--task", setting.task, *setting.eval_args(), "--out", "o"])
    eval_task = task_from_args(args.task, args)
    test_ids = {i.id for i in eval_task.split("test", args.seed, args.test_fraction, args.limit)}

    assert eval_task.params == train_task.params
    assert (args.prompt_style, args.n_exemplars, args.temperature) == ("base", script.n_exemplars, 1.0)
    assert train_ids and test_ids and not train_ids & test_ids
    kept = min(script.instance_limit or 10**9, len(train_task.split("all")))
    assert len(train_ids | test_ids) == kept


def test_concentration_counts_modal_share_and_answers_over_all_instances() -> None:
    one = {"instances": [{"proposals": ["a", "a", "b", None]}, {"proposals": ["a", None, None, None]}]}
    two = {"instances": [{"proposals": ["c", "d", "e", "f"]}, {"proposals": [None, None, None, None]}]}
    result = bench.concentration([one, two])
    assert result["modal_share"] == pytest.approx((0.5 + 0.25 + 0.25 + 0.0) / 4)
    assert result["distinct_answers_overall"] == pytest.approx((2 + 4) / 2)


def test_one_seed_methods_are_compared_with_grpo_on_the_same_seed() -> None:
    grpo_seeds = [_eval({"i": ([rr], 5), "j": ([rr], 5)}) for rr in (0.6, 0.1, 0.2)]
    qd = _eval({"i": ([0.5], 5), "j": ([0.5], 5)})
    collected = {"GRPO": {"evals": grpo_seeds, "eval_seeds": [0, 1, 2], "training": [], "runs": [], "wall_seconds": 0},
                 "QD-GRPO": {"evals": [qd], "eval_seeds": [0], "training": [], "runs": [], "wall_seconds": 0},
                 "base model": {"evals": [qd], "eval_seeds": [], "training": [], "runs": [], "wall_seconds": 0}}
    methods = bench.compare(collected, resamples=100)
    assert methods["QD-GRPO"]["recovery_minus_grpo"]["mean"] == pytest.approx(0.5 - 0.6)  # seed 0 only
    assert methods["QD-GRPO"]["grpo_seeds_compared"] == 1
    assert methods["base model"]["recovery_minus_grpo"]["mean"] == pytest.approx(0.5 - 0.3)  # all three


def test_rl_methods_of_an_sft_protocol_are_compared_with_the_warm_starts_of_their_seeds() -> None:
    def entry(evals: list[dict], seeds: list[int]) -> dict:
        return {"evals": evals, "eval_seeds": seeds, "training": [], "runs": [], "wall_seconds": 0}

    def flat(rr: float) -> dict:
        return _eval({"i": ([rr], 5), "j": ([rr], 5)})

    collected = {"base model": entry([flat(0.0)], []), "SFT only": entry([flat(0.6), flat(0.4)], [0, 1]),
                 "GRPO": entry([flat(0.3), flat(0.2)], [0, 1]), "GRPO + zero_flat_groups": entry([flat(0.5)], [0])}
    methods = bench.compare(collected, resamples=100)
    assert methods["GRPO + zero_flat_groups"]["recovery_minus_sft"]["mean"] == pytest.approx(0.5 - 0.6)  # seed 0 only
    assert methods["GRPO"]["recovery_minus_sft"]["mean"] == pytest.approx(0.25 - 0.5)
    assert methods["GRPO"]["sft_seeds_compared"] == 2
    assert "recovery_minus_sft" not in methods["base model"] and "recovery_minus_sft" not in methods["SFT only"]
    columns, (header, _) = bench.headline_columns(sft=True)
    assert "recovery_at_n_admissible_minus_sft" in columns and "| - SFT |" in header
    assert "- SFT" not in bench.headline_columns(sft=False)[1][0]


def test_rr_at_h_o_and_differences_to_the_base_model_are_paired() -> None:
    def with_rr_h(evaluation: dict, values: list[float]) -> dict:
        for instance, value in zip(evaluation["instances"], values, strict=True):
            instance["recovery_at_n_admissible"] = value
        return evaluation

    base = with_rr_h(_eval({"i": ([0.4], 5), "j": ([0.2], 5)}), [0.3, 0.1])
    grpo = [with_rr_h(_eval({"i": ([0.3], 5), "j": ([0.1], 5)}), [0.2, 0.0]) for _ in range(2)]
    count = [with_rr_h(_eval({"i": ([0.6], 5), "j": ([0.4], 5)}), [0.5, 0.3]) for _ in range(2)]
    collected = {"base model": {"evals": [base], "eval_seeds": [], "training": [], "runs": [], "wall_seconds": 0},
                 "GRPO": {"evals": grpo, "eval_seeds": [0, 1], "training": [], "runs": [], "wall_seconds": 0},
                 "count bonus": {"evals": count, "eval_seeds": [0, 1], "training": [], "runs": [], "wall_seconds": 0}}
    methods = bench.compare(collected, resamples=200)
    versus_base = methods["count bonus"]["recovery_at_n_admissible_minus_base"]
    assert versus_base["mean"] == pytest.approx(0.2)
    assert versus_base["ci_low"] == pytest.approx(0.2) and versus_base["ci_high"] == pytest.approx(0.2)  # paired
    assert methods["count bonus"]["recovery_at_n_admissible_minus_grpo"]["mean"] == pytest.approx(0.3)
    assert methods["GRPO"]["validity_minus_base"]["mean"] == pytest.approx(-0.1 / 2)
    # base: validity 0.2 and 0.1 of 20 samples, |H_O| = 5 drawn
    ceiling = (uniform_coverage_ceiling(20, 4, 5, 5) + uniform_coverage_ceiling(20, 2, 5, 5)) / 2
    assert methods["base model"]["uniform_ceiling_at_n_admissible"]["mean"] == pytest.approx(ceiling)
    data = {"protocol": {"model": "m", "task": "t", "params": {}, "steps": 1, "learning_rate": 1e-5, "samples": 16,
                         "seeds": [0, 1], "max_new_tokens": 24, "methods": [], "prompts_per_step": 4, "sft": False},
            "machine": {"cpu": "c", "cores": 2}, "date": "d", "complete": False, "methods": methods, "law_fits": []}
    text = bench.markdown(data, "x")
    assert "| count bonus | 2 | 0.400 [" in text and "Headline" in text
    assert f"| {ceiling:.3f} [" in text
    # with a seed-level table (the primary statistic) the bootstrap table is titled secondary, not headline
    collected["GRPO"]["training"] = [{"seed": seed, "steps": 1, "evaluated": seed == 0, "series": {}}
                                     for seed in (0, 1)]
    text = bench.markdown({**data, "methods": bench.compare(collected, resamples=200),
                           "seed_level": bench.seed_level(collected)}, "x")
    assert "Secondary, hierarchical bootstrap: order-free" in text and "Headline" not in text
    assert "| GRPO | 2 | 0: 1, 1: 1 (not evaluated) |" in text


def test_confirmatory_rows_leave_out_the_seed_that_chose_a_priority_method() -> None:
    def entry(values: list[float], seeds: list[int]) -> dict:
        evals = [_eval({"i": ([v], 5), "j": ([v], 5)}) for v in values]
        for evaluation, value in zip(evals, values, strict=True):
            for instance in evaluation["instances"]:
                instance["recovery_at_n_admissible"] = value
        return {"evals": evals, "eval_seeds": seeds, "training": [], "runs": [], "wall_seconds": 0}

    # MaxEnt's seed 0 (0.9) chose it; on seeds 1 and 2 it is 0.3 and 0.5, GRPO's are 0.2 and 0.2
    collected = {"base model": entry([0.4], []), "GRPO": entry([0.6, 0.2, 0.2], [0, 1, 2]),
                 "MaxEnt-GRPO": entry([0.9, 0.3, 0.5], [0, 1, 2]), "QD-GRPO": entry([0.9], [0])}
    protocol = bench.Protocol(methods=("grpo", "maxent", "qd"), seeds=(0, 1, 2), all_seeds=True,
                              priority=("maxent", "qd"))
    rows = bench.confirmatory(collected, protocol)
    assert list(rows) == ["MaxEnt-GRPO"]  # QD has no later seed yet
    assert rows["MaxEnt-GRPO"]["seeds"] == 2 and rows["MaxEnt-GRPO"]["recovery"]["mean"] == pytest.approx(0.4)
    assert rows["MaxEnt-GRPO"]["recovery_minus_grpo"]["mean"] == pytest.approx(0.2)
    assert rows["MaxEnt-GRPO"]["recovery_minus_base"]["mean"] == pytest.approx(0.0)
    assert bench.compare(collected)["MaxEnt-GRPO"]["recovery_minus_base"]["mean"] == pytest.approx(0.5 / 3 + 0.0)
    text = bench.markdown({"protocol": {"model": "m", "task": "t", "params": {}, "steps": 1, "learning_rate": 1e-5,
                                        "samples": 16, "seeds": [0, 1, 2], "max_new_tokens": 24, "methods": [],
                                        "priority": ["maxent", "qd"]},
                           "machine": {"cpu": "c", "cores": 2}, "date": "d", "complete": False,
                           "methods": bench.compare(collected), "confirmatory": rows, "law_fits": []}, "x")
    confirmatory = text[text.index("Confirmatory: MaxEnt-GRPO and QD-GRPO run their later seeds"):]
    assert confirmatory.split("\n\n")[1].splitlines()[-1].startswith("| MaxEnt-GRPO | 2 | 0.400 [")


def test_rr_at_h_o_is_reported_per_tier_of_admissible_set_size() -> None:
    # voxel's tiers: |H_O| = 3 and 9 here; seeds pooled within each tier
    def evaluation(values: dict[str, float]) -> dict:
        result = _eval({i: ([0.5], 3 if i.startswith("s") else 9) for i in values})
        for instance in result["instances"]:
            instance["recovery_at_n_admissible"] = values[instance["id"]]
        return result

    seeds = [evaluation({"s1": 1.0, "s2": 0.5, "l1": 0.2}), evaluation({"l1": 0.4, "s2": 0.0, "s1": 1.0})]
    draws = np.random.default_rng(0).integers(0, 3, (50, 3))
    summary, _ = bench.pool_method("GRPO", seeds, draws)
    small, large = summary["recovery_at_n_admissible_by_tier"]
    assert (small["n_admissible"], small["instances"], large["n_admissible"], large["instances"]) == (3, 2, 9, 1)
    assert small["mean"] == pytest.approx((1.0 + 0.5 + 1.0 + 0.0) / 4) and large["mean"] == pytest.approx(0.3)
    assert small["ci_low"] <= small["mean"] <= small["ci_high"] and large["ci_low"] >= 0.2
    text = bench.markdown({"protocol": {"model": "m", "task": "t", "params": {}, "steps": 1, "learning_rate": 1e-5,
                                        "samples": 32, "seeds": [0, 1], "max_new_tokens": 40, "methods": [],
                                        "prompts_per_step": 4, "sft": True},
                           "machine": {"cpu": "c", "cores": 2}, "date": "d", "complete": False,
                           "methods": {"GRPO": {**summary, "training": [], "runs": [], "wall_seconds": 0}},
                           "law_fits": []}, "x")
    assert "| GRPO | 0.625 [" in text and "\\|H_O\\| = 3 (2 instances)" in text


def test_v2_plan_runs_every_method_and_seed_with_the_sft_model_first() -> None:
    protocol = bench.Protocol(methods=("grpo", "count", "ips"), seeds=(0, 1), all_seeds=True, sft=True)
    assert bench.plan(protocol) == [("sft", 0), ("grpo", 0), ("ips", 0), ("sft", 1), ("grpo", 1), ("ips", 1),
                                    ("count", 0), ("count", 1)]
    assert bench.V2.seeds_for("qd") == (0, 1, 2) and bench.V1.seeds_for("qd") == (0,)
    assert "count" in bench.V2.methods and set(bench.V2.methods) <= set(bench.METHODS)


def test_sweep_lines_read_each_grpo_arm(tmp_path: Path) -> None:
    def method(rr_h: float, rr: float, modal: float, validity: list[float] | None = None) -> dict:
        training = [{"steps": 8, "series": {"validity": validity}}] if validity else []
        return {"seeds": 1, "recovery_at_n_admissible": {"mean": rr_h}, "recovery": {"mean": rr},
                "modal_share": modal, "training": training}

    grpo = method(0.1, 0.1, 0.9, [0.2] * 2 + [0.3] * 4 + [0.6] * 2)
    arm = {"protocol": {"learning_rate": 5e-5, "prompts_per_step": 4},
           "methods": {"base model": method(0.2, 0.4, 0.4), "GRPO": grpo}}
    (tmp_path / "sweep_grpo_lr5e-5.json").write_text(json.dumps(arm))
    (tmp_path / "hypospace_recovery_v2.json").write_text("{}")  # not a sweep arm
    flat = {**arm, "protocol": {"learning_rate": 2e-5, "prompts_per_step": 4},
            "methods": {**arm["methods"], "GRPO": method(0.1, 0.1, 0.9, [0.3] * 8)}}
    (tmp_path / "sweep_grpo_lr2e-5.json").write_text(json.dumps(flat))  # lower, but GRPO does not learn
    lines = bench.sweep_lines(tmp_path)
    assert lines[-3:-1] == [
        "| 2e-05 | 4 x 8 | 8 | 0.30 -> 0.30 | 0.200 -> 0.100 | 0.400 -> 0.100 | 0.40 -> 0.90 | sweep_grpo_lr2e-5 |",
        "| 5e-05 (kept) | 4 x 8 | 8 | 0.20 -> 0.60 | 0.200 -> 0.100 | 0.400 -> 0.100 | 0.40 -> 0.90 | "
        "sweep_grpo_lr5e-5 |"]
    assert bench.sweep_lines(tmp_path / "empty") == []


def _fake_units(monkeypatch: pytest.MonkeyPatch, ran: list[str], barrier: threading.Barrier | None = None,
                fail: str | None = None) -> None:
    """Replace the training and evaluation of a unit by writing its recovery.json (no model involved)."""
    def run_unit(protocol, unit, state: Path, log: Path) -> None:
        label = bench.unit_label(unit)
        if barrier is not None and label != "base":
            barrier.wait(timeout=30)  # both workers inside a unit at once, or BrokenBarrierError
        if label == fail:
            raise SystemExit(f"{label} failed")
        ran.append(label)
        (state / "eval" / label).mkdir(parents=True)
        (state / "eval" / label / "recovery.json").write_text("{}")

    monkeypatch.setattr(bench, "run_unit", run_unit)
    monkeypatch.setattr(bench, "write_results", lambda protocol, state, out, complete: {"complete": complete})


def test_parallel_workers_run_each_unfinished_unit_once_and_concurrently(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    protocol = bench.Protocol(methods=("grpo", "ips"), seeds=(0, 1))
    (tmp_path / "eval" / "base").mkdir(parents=True)
    (tmp_path / "eval" / "base" / "recovery.json").write_text("{}")  # finished in an earlier session
    ran: list[str] = []
    _fake_units(monkeypatch, ran, barrier=threading.Barrier(2))  # 4 units left: two pairs meet at the barrier
    result = bench.run(protocol, tmp_path, tmp_path / "out", budget_minutes=None, workers=2)
    assert sorted(ran) == ["grpo-seed0", "grpo-seed1", "ips-seed0", "ips-seed1"] and result == {"complete": True}
    assert (tmp_path / "logs").is_dir()


def test_a_failing_unit_stops_new_units_and_the_budget_stops_all(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    protocol = bench.Protocol(methods=("grpo", "ips"), seeds=(0, 1, 2))
    ran: list[str] = []
    _fake_units(monkeypatch, ran, fail="grpo-seed0")
    with pytest.raises(SystemExit, match="grpo-seed0 failed"):
        bench.run(protocol, tmp_path / "a", tmp_path / "out", budget_minutes=None, workers=1)
    assert ran == ["base"]
    assert bench.run(protocol, tmp_path / "b", tmp_path / "out", budget_minutes=0, workers=2) == {"complete": False}
    assert ran == ["base"]


def _recorded_commands(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Replace `divrl` subprocesses by recording their arguments; return the record."""
    commands: list[list[str]] = []
    monkeypatch.setattr(bench, "_divrl", lambda args, log: commands.append(args))
    return commands


def _fake_clock(monkeypatch: pytest.MonkeyPatch, *readings: float) -> None:
    """`time.time` in the benchmark returns `readings`, one per call."""
    clock = iter(readings)
    monkeypatch.setattr(bench.time, "time", lambda: next(clock))


def test_warm_start_checkpoints_and_resumes_from_its_newest_complete_checkpoint(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    commands = _recorded_commands(monkeypatch)
    before_stop, resumed_start, resumed_end = 500.0, 1000.0, 1060.0  # recorded seconds; a fake clock's readings
    _fake_clock(monkeypatch, resumed_start, resumed_end)
    protocol = bench.V2_VOXEL
    run = tmp_path / "sft" / "seed1"
    for step, complete in ((4, True), (8, True), (12, False)):  # checkpoint-12 was cut short by a stop
        (run / f"checkpoint-{step}").mkdir(parents=True)
        if complete:
            (run / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (run / "divrl_benchmark.json").write_text(json.dumps({"train_seconds": before_stop}))
    assert bench.warm_start(protocol, 1, tmp_path, tmp_path / "log.txt") == run / "merged"
    (command,) = commands
    assert command[command.index("--resume_from_checkpoint") + 1] == str(run / "checkpoint-8")
    assert command[command.index("--save_strategy") + 1] == "steps"
    recorded = json.loads((run / "divrl_benchmark.json").read_text())["train_seconds"]
    assert recorded == before_stop + (resumed_end - resumed_start)  # both parts counted, read off the fake clock


def test_a_committed_warm_start_is_re_merged_from_its_adapter_not_retrained(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    import divrl.sft

    commands = _recorded_commands(monkeypatch)
    merged_from: list[Path] = []
    monkeypatch.setattr(divrl.sft, "merge_adapter", lambda run, out, base: merged_from.append((run, base)) or out)
    run = tmp_path / "sft" / "seed0"
    (run / "merged").mkdir(parents=True)
    (run / "merged" / "config.json").write_text("{}")  # what git holds of the merged model: no weights
    (run / "trainer_state.json").write_text("{}")
    (run / "adapter_model.safetensors").write_bytes(b"")
    assert bench.warm_start(bench.V2_VOXEL, 0, tmp_path, tmp_path / "log.txt") == run / "merged"
    assert merged_from == [(run, bench.MODEL)] and commands == []


def test_a_warm_start_without_adapter_or_checkpoint_is_retrained_and_timed_afresh(monkeypatch: pytest.MonkeyPatch,
                                                                                  tmp_path: Path) -> None:
    commands = _recorded_commands(monkeypatch)
    earlier_record, retrain_start, retrain_end = 2090.0, 1000.0, 1060.0  # recorded seconds; a fake clock's readings
    _fake_clock(monkeypatch, retrain_start, retrain_end)
    run = tmp_path / "sft" / "seed0"
    (run / "merged").mkdir(parents=True)
    (run / "merged" / "config.json").write_text("{}")
    (run / "trainer_state.json").write_text("{}")  # finished on another machine, whose weights are gone
    (run / "divrl_benchmark.json").write_text(json.dumps({"train_seconds": earlier_record}))
    bench.warm_start(bench.V2_VOXEL, 0, tmp_path, tmp_path / "log.txt")
    (command,) = commands
    assert "--resume_from_checkpoint" not in command
    recorded = json.loads((run / "divrl_benchmark.json").read_text())["train_seconds"]
    assert recorded == retrain_end - retrain_start  # the retrain replaces the earlier record, read off the fake clock


def test_a_run_is_finished_only_with_its_weights_not_with_a_committed_trainer_state(monkeypatch: pytest.MonkeyPatch,
                                                                                    tmp_path: Path) -> None:
    commands = _recorded_commands(monkeypatch)
    run = tmp_path / "runs" / "grpo-seed0"
    run.mkdir(parents=True)
    (run / "trainer_state.json").write_text("{}")  # from git: the weights stayed on another machine
    bench.train(bench.V2, "grpo", 0, tmp_path, tmp_path / "log.txt")
    assert len(commands) == 1
    (run / "adapter_model.safetensors").write_bytes(b"")
    prepared: list[str] = []
    monkeypatch.setattr(bench, "resolve_model_name", prepared.append)
    assert bench.train(bench.V2, "grpo", 0, tmp_path, tmp_path / "log.txt") == run and len(commands) == 1
    assert prepared == [bench.MODEL]  # its base is made on a fresh machine before it is evaluated


def test_an_rl_run_records_its_own_time_not_its_warm_start_s(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    warm_start_seconds, training_seconds = 1000.0, 60.0  # how far each step moves a fake clock
    clock = {"now": 0.0}

    def advance(seconds: float, result=None):
        clock["now"] += seconds
        return result

    monkeypatch.setattr(bench.time, "time", lambda: clock["now"])
    merged = tmp_path / "sft" / "seed0" / "merged"
    monkeypatch.setattr(bench, "warm_start", lambda *args: advance(warm_start_seconds, merged))
    monkeypatch.setattr(bench, "_divrl", lambda args, log: advance(training_seconds))
    run = bench.train(bench.V2_VOXEL, "ips", 0, tmp_path, tmp_path / "log.txt")
    recorded = json.loads((run / "divrl_benchmark.json").read_text())["train_seconds"]
    assert recorded == training_seconds  # fake-clock bookkeeping: the warm start's advance is not counted


def test_resume_accepts_a_new_priority_or_an_added_arm_but_not_a_new_budget_or_a_dropped_method() -> None:
    recorded = json.loads(json.dumps(bench.V2.__dict__, default=list))
    assert bench.resumable(recorded, {**recorded, "priority": ["qd"]})
    assert bench.resumable(recorded, {**recorded, "methods": [*recorded["methods"], "grpo+zero_flat_groups"]})
    assert not bench.resumable(recorded, {**recorded, "methods": recorded["methods"][1:]})
    assert not bench.resumable(recorded, {**recorded, "steps": 48})
    before_the_field = {key: value for key, value in recorded.items() if key != "priority"}
    assert bench.resumable(before_the_field, recorded)


def test_units_runs_only_the_named_units_and_names_unknown_ones(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    protocol = bench.Protocol(methods=("grpo", "grpo+zero_flat_groups"), seeds=(0, 1), all_seeds=True)
    ran: list[str] = []
    _fake_units(monkeypatch, ran)
    result = bench.run(protocol, tmp_path, tmp_path / "out", budget_minutes=None,
                       only=("grpo+zero_flat_groups-seed0",))
    assert ran == ["grpo+zero_flat_groups-seed0"] and result == {"complete": False}
    assert (tmp_path / "logs").is_dir()  # beside a running campaign: its own log, not state/log.txt
    with pytest.raises(SystemExit, match="--units ips-seed0: not in this protocol's plan"):
        bench.run(protocol, tmp_path, tmp_path / "out", budget_minutes=None, only=("ips-seed0",))


def test_an_ablation_arm_runs_the_first_seed_only() -> None:
    units = bench.plan(bench.V2_VOXEL)
    assert [u for u in units if u[0] == "grpo+zero_flat_groups"] == [("grpo+zero_flat_groups", 0)]
    assert [s for m, s in units if m == "count"] == [0, 1, 2]


def test_an_ablation_arm_trains_its_recipe_with_the_named_switch_on(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    commands = _recorded_commands(monkeypatch)
    bench.train(bench.V2, "grpo+zero_flat_groups", 0, tmp_path, tmp_path / "log.txt")
    (command,) = commands
    assert command[1].endswith("hypospace-boolean/grpo.yaml")
    assert command[command.index("--zero_flat_groups") + 1] == "true"
    assert command[command.index("--output_dir") + 1] == str(tmp_path / "runs" / "grpo+zero_flat_groups-seed0")


def test_training_signals_keep_the_steps_of_the_held_out_evaluations(tmp_path: Path) -> None:
    history = [{"step": 0, "divrl/eval/validity": 0.3, "divrl/eval/recovery@8": 0.2}]
    history += [{"step": step, "divrl/primary_reward": 0.1 * step} for step in range(1, 7)]
    history += [{"step": 6, "divrl/eval/validity": 0.5, "divrl/eval/recovery@8": 0.1}]
    (tmp_path / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    signals = bench.training_signals(tmp_path)
    assert signals["steps"] == 6 and signals["held_out_steps"] == [0, 6]
    assert signals["series"]["held-out RR@8"] == [0.2, 0.1] and len(signals["series"]["validity"]) == 6
    assert bench.training_signals(tmp_path / "missing") == {"steps": 0, "series": {}, "held_out_steps": []}


def test_seed_level_intervals_are_student_t_over_seeds_and_paired_by_seed() -> None:
    # RR@|H_O| per seed: GRPO 0.2 / 0.4 / 0.3, IPS 0.5 / 0.6 / 0.7 (seed 2 of IPS also), SFT 0.45 / 0.55 / 0.5
    def run(values: list[float]) -> list[dict]:
        return [{"instances": [{**_eval({i: ([v], 3)})["instances"][0], "recovery_at_n_admissible": v}
                               for i in ("a", "b")]} for v in values]

    collected = {label: {"evals": run(values), "eval_seeds": [0, 1, 2]} for label, values in (
        ("GRPO", [0.2, 0.4, 0.3]), ("IPS-GRPO", [0.5, 0.6, 0.7]), ("SFT only", [0.45, 0.55, 0.5]))}
    rows = bench.seed_level(collected)
    ips = rows["IPS-GRPO"]["recovery_at_n_admissible"]
    assert ips["per_seed"] == pytest.approx({0: 0.5, 1: 0.6, 2: 0.7}) and ips["mean"] == pytest.approx(0.6)
    # t(0.975, 2) = 4.3027; sd of (0.5, 0.6, 0.7) = 0.1
    assert ips["ci_high"] - ips["mean"] == pytest.approx(4.3027 * 0.1 / 3 ** 0.5, rel=1e-4)
    versus_grpo = rows["IPS-GRPO"]["recovery_at_n_admissible_minus_grpo"]  # by seed: 0.3, 0.2, 0.4
    assert versus_grpo["mean"] == pytest.approx(0.3) and versus_grpo["seeds"] == [0, 1, 2]
    assert versus_grpo["ci_low"] == pytest.approx(0.3 - 4.3027 * 0.1 / 3 ** 0.5, rel=1e-4)
    versus_sft = rows["IPS-GRPO"]["recovery_at_n_admissible_minus_sft"]  # by seed: 0.05, 0.05, 0.2
    assert versus_sft["mean"] == pytest.approx(0.1)
    assert "recovery_at_n_admissible_minus_grpo" not in rows["GRPO"]
    one = bench.t_interval([0.4])
    assert one["mean"] == 0.4 and np.isnan(one["ci_low"])
    table = "\n".join(bench.seed_level_lines(rows))
    assert "| IPS-GRPO | 3 | 0: 0.500, 1: 0.600, 2: 0.700 | 0.600 [" in table and "+0.300 [" in table
    assert bench.control_lines(rows) == []  # no continued-SFT control ran: no secondary table

    # the continued-SFT control (2 seeds) adds a secondary comparison on the seeds both have, outside the primary table
    collected["SFT + more SFT"] = {"evals": run([0.55, 0.8]), "eval_seeds": [0, 1]}
    rows = bench.seed_level(collected)
    versus_control = rows["IPS-GRPO"]["recovery_at_n_admissible_minus_more_sft"]  # by seed: -0.05, -0.2
    assert versus_control["mean"] == pytest.approx(-0.125) and versus_control["seeds"] == [0, 1]
    assert "recovery_at_n_admissible_minus_more_sft" not in rows["SFT + more SFT"]
    assert "more SFT" not in "\n".join(bench.seed_level_lines(rows)).split("\n")[2]  # primary header unchanged
    control = "\n".join(bench.control_lines(rows))
    assert "added after the analysis plan" in control
    assert "| IPS-GRPO | 2 | -0.125 [" in control and "| SFT + more SFT |" not in control


def test_target_verdict_needs_validity_near_grpo_and_both_recovery_intervals_above_zero() -> None:
    def stats(values: list[float]) -> dict:
        return {**bench.t_interval(values), "seeds": list(range(len(values)))}

    def row(validity: list[float], minus_grpo: list[float], minus_sft: list[float]) -> dict:
        return {"validity_minus_grpo": stats(validity), "recovery_at_n_admissible_minus_grpo": stats(minus_grpo),
                "recovery_at_n_admissible_minus_sft": stats(minus_sft)}

    rows = {"reaches": row([-0.01, -0.02, -0.01], [0.3, 0.2, 0.4], [0.10, 0.12, 0.11]),
            "too invalid": row([-0.05, -0.02, -0.04], [0.3, 0.2, 0.4], [0.10, 0.12, 0.11]),
            "sft interval spans 0": row([0.0, 0.0, 0.0], [0.3, 0.2, 0.4], [0.2, 0.0, 0.1]),
            "one seed": row([0.0], [0.3], [0.2]),
            "GRPO": {"validity": stats([0.9, 0.9])}}  # no differences to itself: not judged
    verdicts = bench.target_verdicts(rows, margin=0.02)
    assert set(verdicts) == {"reaches", "too invalid", "sft interval spans 0", "one seed"}
    assert verdicts["reaches"] == {"reached": True, "misses": [], "seeds": [0, 1, 2]}
    assert not verdicts["too invalid"]["reached"] and verdicts["too invalid"]["misses"] == [
        "validity - GRPO -0.037 (more than 0.02 below GRPO's)"]
    assert [m.split(" ")[2] for m in verdicts["sft interval spans 0"]["misses"]] == ["SFT"]
    assert len(verdicts["one seed"]["misses"]) == 2 and not verdicts["one seed"]["reached"]
    lines = "\n".join(bench.target_lines({"validity_margin": 0.02, "verdicts": verdicts}, planned_seeds=3))
    assert "- reaches (final): REACHED." in lines
    assert "- one seed (provisional, 1 of 3 seeds): NOT reached: RR@|H_O| - GRPO +0.300 (1 seed)" in lines
    assert bench.target_lines(None, 5) == [] and bench.V2_VOXEL.target_validity_margin is None
    recorded = json.loads(json.dumps(bench.V3_VOXEL.__dict__, default=list))
    recorded.pop("target_validity_margin")  # the campaign recorded its protocol before the report had a target
    assert bench.resumable(recorded, json.loads(json.dumps(bench.V3_VOXEL.__dict__, default=list)))


def test_v3_plan_completes_sft_grpo_ips_for_every_seed_then_each_other_arm_in_turn() -> None:
    protocol = bench.Protocol(**{**bench.V3_VOXEL.__dict__, "seeds": (0, 1)})
    assert bench.plan(protocol) == [
        ("sft", 0), ("grpo", 0), ("ips", 0), ("sft", 1), ("grpo", 1), ("ips", 1),
        (bench.CONTINUED_SFT, 0), (bench.CONTINUED_SFT, 1), ("maxent", 0), ("maxent", 1),
        ("count+ips", 0), ("count+ips", 1)]
    recorded = json.loads(json.dumps(bench.V2_VOXEL.__dict__, default=list))
    for newer in ("sft_steps", "arm_by_arm", "full_arms", "lr_scheduler"):  # v2 recorded none of these
        recorded.pop(newer)
    assert bench.resumable(recorded, json.loads(json.dumps(bench.V2_VOXEL.__dict__, default=list)))


def test_weak_warm_start_and_continued_sft_take_the_protocol_budget(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    commands = _recorded_commands(monkeypatch)
    protocol = bench.Protocol(**{**bench.V3_VOXEL.__dict__, "sft_steps": 9, "steps": 24})
    merged = tmp_path / "sft" / "seed3" / "merged"
    merged.mkdir(parents=True)
    (merged / "model.safetensors").write_text("")  # the seed's warm start exists: only the control trains
    assert bench.continue_sft(protocol, 3, tmp_path, tmp_path / "log.txt") == tmp_path / "runs" / "more-sft-seed3" / \
        "merged"
    (command,) = commands
    flag = {name: command[command.index(name) + 1] for name in (
        "--model_name_or_path", "--max_steps", "--per_device_train_batch_size", "--learning_rate",
        "--lr_scheduler_type", "--sample_seed", "--seed", "--recovery_eval", "--eval_steps")}
    assert flag == {"--model_name_or_path": str(merged), "--max_steps": "24", "--per_device_train_batch_size": "32",
                    "--learning_rate": "5e-05", "--lr_scheduler_type": "constant", "--sample_seed": "1003",
                    "--seed": "3", "--recovery_eval": "true", "--eval_steps": str(protocol.eval_steps)}
    continued_curve = command[command.index("--recovery_eval"):]
    commands.clear()
    bench.warm_start(protocol, 4, tmp_path, tmp_path / "log.txt")
    assert commands[0][commands[0].index("--max_steps") + 1] == "9"
    commands.clear()
    bench.train(protocol, "count+ips", 4, tmp_path, tmp_path / "log.txt")
    train = commands[-1]
    assert train[1].endswith("hypospace-voxel/count.yaml") and train[train.index("--ips") + 1] == "true"
    assert train[train.index("--lr_scheduler_type") + 1] == "constant"
    assert train[train.index("--recovery_eval"):][:4] == continued_curve[:4]  # the same held-out curve as RL's
    assert protocol.seeds_for("count+ips") == (0, 1, 2, 3, 4)


def test_v3_budget_pilot_rule_stops_at_the_first_window_that_barely_rises() -> None:
    import v3_pilots

    rising = [0.4] * 8 + [0.5] * 8 + [0.6] * 8 + [0.62] * 8 + [0.7] * 8
    assert v3_pilots.plateau_budget(rising)["budget"] == 32
    assert v3_pilots.plateau_budget([0.5] * 40)["budget"] == v3_pilots.MIN_BUDGET
    assert v3_pilots.plateau_budget([0.1 * (i // 8) for i in range(40)])["budget"] == v3_pilots.MAX_BUDGET


def test_each_seed_is_evaluated_on_its_own_sampling_stream_over_the_same_split(monkeypatch: pytest.MonkeyPatch,
                                                                              tmp_path: Path) -> None:
    commands = _recorded_commands(monkeypatch)
    (tmp_path / "eval" / "ips-seed3").mkdir(parents=True)  # `divrl eval` would make it
    bench.evaluate(bench.V2_VOXEL, "ips-seed3", "model", tmp_path, tmp_path / "log.txt", seed=3)
    (command,) = commands
    assert command[command.index("--sample-seed") + 1] == "3" and command[command.index("--split") + 1] == "test"
    assert command[command.index("--seed") + 1] == "0"  # the split seed stays the recipe's


def test_a_partly_evaluated_seed_is_reported_with_its_recorded_instances(tmp_path: Path) -> None:
    partial = tmp_path / "maxent-seed1" / "partial"
    partial.mkdir(parents=True)
    lines = [{"dtype": "auto", "instances": ["a", "b", "c"], "limit": 3}, {"id": "a", "completions": ["x"]},
             {"id": "b", "completions": ["y"]}]
    (partial / "0123.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert bench.partial_evaluation(tmp_path / "maxent-seed1") == (2, 3)
    assert bench.partial_evaluation(tmp_path / "missing") is None
    note = bench._evaluation_note({"evaluated": False, "partial": (2, 3)})
    assert "2 of 3 instances recorded" in note and "not evaluated" not in note
    assert bench._evaluation_note({"evaluated": False, "partial": None}) == " (not evaluated)"
    assert bench._evaluation_note({"evaluated": True}) == ""


def test_post_v3_maxent_arm_reuses_v3_warm_starts_in_its_stated_order_with_one_component_per_ablation(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    protocol = bench.V3_MAXENT_VOXEL
    later = [bench.unit_label(unit) for unit in bench.plan(protocol) if unit[0] not in ("sft", "grpo")]
    assert later == list(protocol.order) and protocol.seeds_for("novelty-only") == (0,)
    assert protocol.seeds_for("grpo") == protocol.seeds  # v3's reference rows, every seed
    assert {key: value for key, value in protocol.__dict__.items()
            if key not in ("methods", "target_validity_margin", "warm_starts_from", "order")} == {
        key: value for key, value in bench.V3_VOXEL.__dict__.items()
        if key not in ("methods", "target_validity_margin", "warm_starts_from", "order")}  # v3's budget and eval
    state = tmp_path / "hypospace_recovery_v3_maxent_voxel"
    merged = tmp_path / protocol.warm_starts_from / "sft" / "seed0" / "merged"
    merged.mkdir(parents=True)
    (merged / "model.safetensors").write_text("")  # v3's warm start: nothing is trained again
    commands = _recorded_commands(monkeypatch)
    for arm, flag, value in (("entropy-only", "--maxent_entropy_target", "1.0"), ("novelty-only", "--novelty_coef",
                                                                                     "0.3"),
                             ("length-bins-only", "--length_bins", "3")):
        bench.train(protocol, arm, 0, state, tmp_path / "log.txt")
        command = commands[-1]
        assert command[1].endswith("hypospace-voxel/grpo.yaml") and command[command.index(flag) + 1] == value
        assert command[command.index("--model_name_or_path") + 1] == str(merged)
        assert command[command.index("--output_dir") + 1] == str(state / "runs" / f"{arm}-seed0")
    assert len(commands) == 3
    with pytest.raises(ValueError, match="not METHOD-seedS"):
        bench.split_label("maxent")
