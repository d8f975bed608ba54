"""Recovery evaluation: exact curves with scripted samplers, both protocols, the CLI, and a tiny real model."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from divrl import cli, sampling
from divrl.core import vendi_score_of_keys
from divrl.tasks.hypospace import VoxelTask, recovery_cli
from divrl.tasks.hypospace.common import Instance
from divrl.tasks.hypospace.metrics import score_proposals
from divrl.tasks.hypospace.recovery import bootstrap_mean, evaluate_recovery, samples_per_instance
from divrl.tasks.hypospace.recovery_cli import expand_models

# Four instances (one occupied cell of a 2x2 grid, height 1 or 2): H_O = {h1, h2} each.
TASK = VoxelTask(grid=2, max_height=2, max_blocks=1)
INSTANCES = TASK.instances()


def _scripts() -> dict[str, list[str]]:
    """Per-instance answers (by instance id) and, in comments, what they must score."""
    answers: dict[str, list[str]] = {}
    (a, b, c, d) = INSTANCES
    h = {inst.id: [TASK.render_answer(x) for x in inst.hypotheses] for inst in INSTANCES}
    answers[a.id] = [h[a.id][0], h[a.id][0], "garbage", h[a.id][1]]  # RR .5 .5 .5 1; validity 3/4; unique 2/4
    answers[b.id] = ["no idea"] * 4  # RR 0 0 0 0; validity 0; unique 0
    answers[c.id] = [h[c.id][1], h[a.id][0], h[c.id][0], h[c.id][0]]  # RR .5 .5 1 1; validity 3/4; unique 3/4
    answers[d.id] = [h[d.id][0]] * 4  # RR .5 .5 .5 .5; validity 1; unique 1/4
    return answers


EXPECTED = {
    "curve": [0.375, 0.375, 0.5, 0.625],
    "validity": 0.625,
    "uniqueness": 0.375,
    "recovery": 0.625,
    "distinct_valid": [0.75, 0.75, 1.0, 1.25],
    "per_instance_curves": [[0.5, 0.5, 0.5, 1.0], [0.0] * 4, [0.5, 0.5, 1.0, 1.0], [0.5] * 4],
    # Order-free: a and c have c_h = 2 and 1 of N = 4 (P(found within n) = 1 - C(4 - c, n) / C(4, n)):
    # h with c = 2: 1/2, 5/6, 1, 1; h with c = 1: 1/4, 1/2, 3/4, 1; RR = their mean. d: c = 4 for one of 2.
    "per_instance_unbiased": [[3 / 8, 2 / 3, 7 / 8, 1.0], [0.0] * 4, [3 / 8, 2 / 3, 7 / 8, 1.0], [0.5] * 4],
    "curve_unbiased": [5 / 16, 11 / 24, 9 / 16, 5 / 8],
    "recovery_at_n_admissible": 11 / 24,  # |H_O| = 2 for every instance
    # valid 3, 0, 3, 4 of N = 4, spread evenly over |H_O| = 2, 2 drawn: m valid among them (hypergeometric) miss a
    # given h with probability (1/2)^m; c = 3: m = 1 or 2 equally likely, 1 - 3/8; c = 4: m = 2, 1 - 1/4
    "uniform_ceiling_at_n_admissible": (5 / 8 + 0 + 5 / 8 + 3 / 4) / 4,
    "pass_at_k": [5 / 8, 3 / 4, 3 / 4, 3 / 4],  # valid samples 3, 0, 3, 4 of 4
}


def _instance_of(prompt: sampling.Prompt, instances: Sequence[Instance]) -> Instance:
    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    query = "Top view:" + text.rsplit("Top view:", 1)[1].split("\n\n", 1)[0]  # the last block is the query
    (match,) = [i for i in instances if TASK.observation_block(i.observations) == query.strip()]
    return match


class ScriptedSampler:
    """Returns each instance's scripted answers in order, whatever the protocol asks for."""

    has_chat_template = True

    def __init__(self, scripts: dict[str, list[str]]) -> None:
        self.scripts = {k: list(v) for k, v in scripts.items()}
        self.calls: list[tuple[int, int]] = []

    def __call__(self, prompts: Sequence[sampling.Prompt], n: int = 1) -> list[list[str]]:
        self.calls.append((len(prompts), n))
        out = []
        for prompt in prompts:
            script = self.scripts[_instance_of(prompt, INSTANCES).id]
            out.append([script.pop(0) for _ in range(n)])
        return out


@pytest.mark.parametrize("protocol", ["parallel", "sequential"])
def test_recovery_curves_equal_the_hand_computed_ones(protocol: str) -> None:
    sampler = ScriptedSampler(_scripts())
    result = evaluate_recovery(TASK, INSTANCES, sampler, 4, protocol, instances_per_call=3, progress=False)
    assert [r["curve"] for r in result["instances"]] == EXPECTED["per_instance_curves"]
    assert result["curve"]["mean"] == pytest.approx(EXPECTED["curve"])
    assert result["distinct_valid"]["mean"] == pytest.approx(EXPECTED["distinct_valid"])
    for metric in ("validity", "uniqueness", "recovery"):
        stats = result[metric]
        assert stats["mean"] == pytest.approx(EXPECTED[metric])
        assert stats["ci_low"] <= stats["mean"] <= stats["ci_high"]
    assert result["n_instances"] == 4
    expected_calls = [(3, 4), (1, 4)] if protocol == "parallel" else [(3, 1)] * 4 + [(1, 1)] * 4
    assert sampler.calls == expected_calls
    unbiased = [r["curve_unbiased"] for r in result["instances"]]
    assert np.allclose(unbiased, EXPECTED["per_instance_unbiased"])
    for metric in ("curve_unbiased", "pass_at_k"):
        assert result[metric]["mean"] == pytest.approx(EXPECTED[metric])
    assert result["recovery_at_n_admissible"]["mean"] == pytest.approx(EXPECTED["recovery_at_n_admissible"])
    assert result["recovery_at_n_admissible"]["instances"] == 4
    ceiling = result["uniform_ceiling_at_n_admissible"]
    assert ceiling["mean"] == pytest.approx(EXPECTED["uniform_ceiling_at_n_admissible"]) and ceiling["instances"] == 4
    assert result["curve_unbiased"]["mean"][-1] == pytest.approx(result["curve"]["mean"][-1])  # agree at n = N
    assert result["pass_at_n"]["mean"] == pytest.approx(0.75) and result["curve_n"] == 4
    assert result["distinct_valid_unbiased"]["mean"] == pytest.approx([2 * v for v in EXPECTED["curve_unbiased"]])


def test_score_proposals_marks_rr_at_the_admissible_size_undefined_below_it() -> None:
    record = score_proposals(["a", None], frozenset({"a", "b", "c"}))
    assert record["recovery_at_n_admissible"] is None and record["recovery"] == pytest.approx(1 / 3)
    assert record["uniform_ceiling_at_n_admissible"] is None
    assert record["curve_unbiased"] == pytest.approx([1 / 6, 1 / 3]) and record["pass_at_k"] == pytest.approx([0.5, 1])


def test_vendi_score_counts_distinct_valid_proposals_by_their_frequencies() -> None:
    admissible = frozenset({"a", "b", "c"})
    assert score_proposals(["a", "a", "b", "b", "x", None], admissible)["vendi_valid"] == pytest.approx(2.0)
    assert score_proposals(["a", "a", "a", "a"], admissible)["vendi_valid"] == pytest.approx(1.0)
    assert score_proposals(["x", None], admissible)["vendi_valid"] == 0.0  # nothing valid


def test_samples_per_hypothesis_budget_varies_n_per_instance() -> None:
    task = VoxelTask(grid=2, max_height=2, max_blocks=2)  # |H_O| = 2 (one cell) or 4 (two cells)
    instances = task.instances()
    counts = samples_per_instance(instances, 1.5)
    assert counts == [3 if len(i.hypotheses) == 2 else 6 for i in instances] and {3, 6} == set(counts)
    assert samples_per_instance(instances[:1], 1.1) == [3]  # ceil(2.2); and 1.1 * 10 must give 11, not 12:
    assert samples_per_instance([Instance("x", "voxel", {}, (), tuple("abcdefghij"))], 1.1) == [11]
    with pytest.raises(ValueError, match="must be > 0"):
        samples_per_instance(instances, 0)
    calls: list[tuple[int, int]] = []

    def first_hypotheses(prompts: Sequence[sampling.Prompt], n: int = 1) -> list[list[str]]:
        calls.append((len(prompts), n))
        out = []
        for prompt in prompts:
            (inst,) = [i for i in instances if task.observation_block(i.observations) in prompt[-1]["content"]]
            out.append([task.render_answer(inst.hypotheses[j % 2]) for j in range(n)])  # h0, h1, h0, ...
        return out

    result = evaluate_recovery(task, instances, first_hypotheses, counts, instances_per_call=len(instances),
                               progress=False)
    assert sorted(calls) == sorted([(counts.count(3), 3), (counts.count(6), 6)])
    assert [r["n_samples"] for r in result["instances"]] == counts
    assert result["curve_n"] == 3 and len(result["curve"]["mean"]) == 3 and len(result["pass_at_k"]["mean"]) == 3
    for record in result["instances"]:
        size = record["n_admissible"]
        assert record["recovery"] == pytest.approx(2 / size)  # two distinct hypotheses found among N
        # order-free RR@|H_O|: h0 and h1 appear ceil(N/2) and floor(N/2) times; |H_O| of the N drawn at a time
        n = record["n_samples"]
        found = [1 - math.comb(n - c, size) / math.comb(n, size) for c in ((n + 1) // 2, n // 2)]
        assert record["recovery_at_n_admissible"] == pytest.approx(sum(found) / size)
    mean_at_size = np.mean([r["recovery_at_n_admissible"] for r in result["instances"]])
    assert result["recovery_at_n_admissible"]["mean"] == pytest.approx(mean_at_size)
    assert result["recovery"]["mean"] == pytest.approx(np.mean([r["recovery"] for r in result["instances"]]))


def test_sequential_prompts_list_earlier_proposals_and_steer_a_cooperative_model() -> None:
    task = VoxelTask(grid=2, max_height=3, max_blocks=2, fixed=True)  # |H_O| = 9
    instances = task.instances()[:2]
    seen_counts: list[int] = []

    def cooperative(prompts: Sequence[sampling.Prompt], n: int = 1) -> list[list[str]]:
        out = []
        for prompt in prompts:
            text = prompt[-1]["content"]
            instance = next(i for i in instances if task.observation_block(i.observations) in text)
            earlier = text.split("Earlier proposals", 1)[1].split("\n\nPropose", 1)[0] if "Earlier" in text else ""
            listed = [task.parse("Structure:" + chunk) for chunk in earlier.split("Structure:")[1:]]
            seen_counts.append(len(listed))
            fresh = next(h for h in instance.hypotheses if h not in listed)
            out.append([task.render_answer(fresh)])
        return out

    result = evaluate_recovery(task, instances, cooperative, 5, "sequential", progress=False)
    assert result["curve"]["mean"] == pytest.approx([n / 9 for n in range(1, 6)])
    assert seen_counts == [k for k in range(5) for _ in instances]
    assert result["uniqueness"]["mean"] == 1.0


def test_bootstrap_interval() -> None:
    constant = bootstrap_mean(np.full(10, 0.3))
    assert constant["mean"] == pytest.approx(0.3) and constant["ci_low"] == pytest.approx(0.3)
    spread = bootstrap_mean(np.array([0.0, 1.0] * 50), resamples=2000)
    assert spread["mean"] == 0.5 and 0.38 < spread["ci_low"] < 0.5 < spread["ci_high"] < 0.62


def test_sampler_returning_too_few_completions_is_an_error() -> None:
    with pytest.raises(ValueError, match="must return 4 completions"):
        evaluate_recovery(TASK, INSTANCES, lambda prompts, n: [["x"]] * len(prompts), 4, progress=False)


# ---------------------------------------------------------------------------------------------------------
# The command line, with the sampler factory patched


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(cli, "COMMANDS", {"hypospace": "divrl.tasks.hypospace.cli"})
    monkeypatch.setattr(cli, "EVAL_COMMANDS", {"recovery": "divrl.tasks.hypospace.recovery_cli"})
    return cli.main(argv)


def _fake_model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


VOXEL_ARGS = ["--task", "hypospace-voxel", "--grid", "2", "--max-height", "2", "--max-blocks", "1"]


def test_cli_writes_exact_json_and_one_curve_per_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    for step in (10, 2):
        _fake_model(run_dir / f"checkpoint-{step}")
    made: list[str] = []

    def fake_make_sampler(model: str, config: sampling.SamplingConfig, **kwargs: object) -> ScriptedSampler:
        made.append(model)
        return ScriptedSampler(_scripts())

    monkeypatch.setattr(sampling, "make_sampler", fake_make_sampler)
    out = tmp_path / "eval"
    argv = ["eval", "recovery", "--model", str(run_dir), *VOXEL_ARGS, "--split", "all", "--samples", "4"]
    assert _run([*argv, "--out", str(out), "--no-progress"], monkeypatch) == 0
    assert made == [str(run_dir / "checkpoint-2"), str(run_dir / "checkpoint-10")]
    report = json.loads((out / "recovery.json").read_text())
    assert report["task"] == "hypospace-voxel" and report["samples"] == 4 and report["protocol"] == "parallel"
    assert [m["label"] for m in report["models"]] == ["run/checkpoint-2", "run/checkpoint-10"]
    for model in report["models"]:
        assert model["prompt_style"] == "chat"
        assert model["curve"]["mean"] == pytest.approx(EXPECTED["curve"])
        assert model["validity"]["mean"] == pytest.approx(EXPECTED["validity"])
        assert [r["curve"] for r in model["instances"]] == EXPECTED["per_instance_curves"]
    assert (out / "recovery.png").stat().st_size > 0


def test_cli_resumes_an_interrupted_evaluation_from_its_finished_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    model = _fake_model(tmp_path / "model")

    class Interrupted(Exception):
        pass

    class InterruptedSampler(ScriptedSampler):
        """Answers `chunks` calls, then stops as a killed evaluation would."""

        def __init__(self, chunks: int) -> None:
            super().__init__(_scripts())
            self.left = chunks

        def __call__(self, prompts: Sequence[sampling.Prompt], n: int = 1) -> list[list[str]]:
            if self.left == 0:
                raise Interrupted
            self.left -= 1
            return super().__call__(prompts, n)

    out = tmp_path / "eval"
    argv = ["eval", "recovery", "--model", str(model), *VOXEL_ARGS, "--split", "all", "--samples", "4",
            "--instances-per-call", "1", "--no-progress", "--out", str(out)]
    monkeypatch.setattr(sampling, "make_sampler", lambda *a, **k: InterruptedSampler(2))
    with pytest.raises(Interrupted):
        _run(argv, monkeypatch)
    (partial,) = (out / "partial").glob("*.jsonl")
    assert len(partial.read_text().splitlines()) == 1 + 2  # the settings, then the two finished instances
    with partial.open("a") as file:
        file.write('{"id": "cut sh')  # the interruption cut a line short: ignored

    resumed = ScriptedSampler(_scripts())
    for instance in INSTANCES[:2]:  # what the first run consumed
        resumed.scripts[instance.id] = []
    monkeypatch.setattr(sampling, "make_sampler", lambda *a, **k: resumed)
    assert _run(argv, monkeypatch) == 0
    assert resumed.calls == [(1, 4), (1, 4)]  # only the two unfinished instances were sampled
    assert "2 resumed from" in capsys.readouterr().err
    (result,) = json.loads((out / "recovery.json").read_text())["models"]
    assert [r["curve"] for r in result["instances"]] == EXPECTED["per_instance_curves"]
    assert result["resumed_instances"] == 2
    assert not (out / "partial").exists()

    # other settings (here the temperature) start over instead of mixing two evaluations, and leave the
    # interrupted one's record alone
    monkeypatch.setattr(sampling, "make_sampler", lambda *a, **k: InterruptedSampler(1))
    with pytest.raises(Interrupted):
        _run(argv, monkeypatch)
    (interrupted,) = (out / "partial").glob("*.jsonl")
    fresh = ScriptedSampler(_scripts())
    monkeypatch.setattr(sampling, "make_sampler", lambda *a, **k: fresh)
    assert _run([*argv, "--temperature", "0.5"], monkeypatch) == 0
    assert len(fresh.calls) == len(INSTANCES)
    assert list((out / "partial").glob("*.jsonl")) == [interrupted]
    assert len(interrupted.read_text().splitlines()) == 1 + 1


def test_model_signature_follows_the_weights_not_their_file_times(tmp_path: Path) -> None:
    from divrl.tasks.hypospace.recovery_cli import model_signature

    weights = tmp_path / "adapter_model.safetensors"
    weights.write_bytes(b"trained once")
    before = model_signature(str(tmp_path))
    os.utime(weights, ns=(1, 1))  # a fresh checkout of the same weights
    assert model_signature(str(tmp_path)) == before
    weights.write_bytes(b"trained again")
    assert model_signature(str(tmp_path)) != before
    assert model_signature("org/hub-model") == ["org/hub-model"]


def test_recorded_completions_must_match_the_budget() -> None:
    from divrl.tasks.hypospace.recovery import sample_instances

    done = {INSTANCES[0].id: ["a", "b"]}  # 2 recorded, 4 wanted
    with pytest.raises(ValueError, match=f"2 completions recorded for {INSTANCES[0].id}, 4 wanted"):
        sample_instances(INSTANCES, ScriptedSampler(_scripts()), 4, "parallel", TASK.prompts_for("chat"), TASK.parse,
                         done=done)


def test_cli_samples_per_hypothesis_and_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    model = _fake_model(tmp_path / "model")
    monkeypatch.setattr(sampling, "make_sampler", lambda *a, **k: ScriptedSampler(_scripts()))
    out = tmp_path / "eval"
    argv = ["eval", "recovery", "--model", str(model), *VOXEL_ARGS, "--split", "all", "--samples-per-hypothesis", "2"]
    assert _run([*argv, "--out", str(out), "--no-progress"], monkeypatch) == 0
    report = json.loads((out / "recovery.json").read_text())
    assert report["samples"] is None and report["samples_per_hypothesis"] == 2.0
    assert "curve_unbiased" in report["estimators"]
    (result,) = report["models"]
    assert [r["n_samples"] for r in result["instances"]] == [4] * 4  # ceil(2 x |H_O| = 2)
    assert result["curve_unbiased"]["mean"] == pytest.approx(EXPECTED["curve_unbiased"])
    table = capsys.readouterr().out
    header, row = table.splitlines()[:2]
    assert header.split()[1:8] == ["validity", "uniqueness", "vendi", "pass@N", "RR@|H_O|", "ceiling", "RR@N"]
    admissible = {i.id: i.admissible for i in VoxelTask(grid=2, max_height=2, max_blocks=1).instances()}
    vendi = np.mean([vendi_score_of_keys([p if p in admissible[r["id"]] else None for p in r["proposals"]])
                     for r in result["instances"]])
    expected = [0.625, 0.375, vendi, 0.75, 11 / 24, EXPECTED["uniform_ceiling_at_n_admissible"], 0.625]
    assert [float(v) for v in row.split()[1:8]] == pytest.approx(expected, abs=6e-3)
    help_text = recovery_cli_help(monkeypatch, capsys)
    assert "1 - C(N - c_h, n) / C(N, n)" in help_text and "The printed table uses the order-free" in help_text


def test_cli_refuses_both_budgets(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    argv = ["eval", "recovery", "--model", "m", *VOXEL_ARGS, "--samples", "4", "--samples-per-hypothesis", "2"]
    with pytest.raises(SystemExit):
        _run([*argv, "--out", "o"], monkeypatch)
    assert "--samples-per-hypothesis: not allowed with argument --samples" in capsys.readouterr().err


def recovery_cli_help(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    with pytest.raises(SystemExit):
        _run(["eval", "recovery", "--help"], monkeypatch)
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "./no/such/model"], "does not exist"),
        (["--model", "M", "--max-height", "9"], "max_height must be an integer in"),
        (["--model", "M", "--test-fraction", "0"], "split 'test' .* is empty"),
        (["--model", "M", "--nodes", "3"], "--nodes applies to the causal domain"),
        (["--model", "M", "--samples", "0"], "--samples must be >= 1"),
        (["--model", "M", "--samples-per-hypothesis", "0"], "--samples-per-hypothesis must be > 0"),
    ],
)
def test_cli_errors_are_clear(
    extra: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    model = str(_fake_model(tmp_path / "model"))
    extra = [model if e == "M" else e for e in extra]
    argv = ["eval", "recovery", *VOXEL_ARGS, "--split", "test", *extra, "--out", str(tmp_path / "o")]
    assert _run(argv, monkeypatch) == 2
    assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize("out", ["file", "under-a-file"])
def test_cli_checks_out_before_loading_any_model(
    out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "taken").write_text("not a directory")
    out_path = tmp_path / "taken" if out == "file" else tmp_path / "taken" / "eval"
    checked: list[str] = []
    monkeypatch.setattr(recovery_cli, "_check_model_exists", checked.append)
    monkeypatch.setattr(sampling, "make_sampler", lambda *a, **k: pytest.fail("a model was loaded"))
    argv = ["eval", "recovery", "--model", "org/model", *VOXEL_ARGS, "--split", "all", "--out", str(out_path)]
    assert _run(argv, monkeypatch) == 2
    message = "exists and is not a directory" if out == "file" else "is not writable"
    assert re.search(f"--out '{re.escape(str(out_path))}' {message}", capsys.readouterr().err)
    assert checked == []


def test_expand_models_keeps_plain_models(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    _fake_model(model / "checkpoint-5")  # a model directory is never expanded
    assert expand_models([str(model), "org/name"]) == [(str(model), str(model)), ("org/name", "org/name")]


def test_labels_name_models_and_their_checkpoints(tmp_path: Path) -> None:
    model = _fake_model(tmp_path / "m")
    _fake_model(tmp_path / "run" / "checkpoint-5")
    assert expand_models([str(model), str(tmp_path / "run")], ["GRPO", "IPS"]) == [
        ("GRPO", str(model)), ("IPS/checkpoint-5", str(tmp_path / "run" / "checkpoint-5"))]


def test_a_label_count_that_does_not_match_the_models_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture) -> None:
    argv = ["eval", "recovery", "--model", "org/a", "--model", "org/b", "--label", "A", *VOXEL_ARGS,
            "--out", str(tmp_path / "eval")]
    assert _run(argv, monkeypatch) == 2
    assert "--label was given 1 time(s) for 2 --model(s)" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()


def test_recipe_eval_flags_follow_the_recipe_and_default_as_divrl_train_does() -> None:
    import dataclasses

    from divrl.train import TrainScriptArguments
    from divrl.trainers.config import DivRLConfig

    recipe = {"split_seed": 7, "prompt_style": "base", "n_exemplars": 2, "temperature": 0.8}
    assert recovery_cli.recipe_eval_flags(recipe) == [
        "--seed", "7", "--prompt-style", "base", "--n-exemplars", "2", "--temperature", "0.8"]
    assert recovery_cli.recipe_eval_flags(recipe, zero_shot=True)[5] == "0"
    defaults = TrainScriptArguments()
    temperature = next(f.default for f in dataclasses.fields(DivRLConfig) if f.name == "temperature")
    expected = ["--seed", str(defaults.split_seed), "--prompt-style", defaults.prompt_style,
                "--n-exemplars", str(defaults.n_exemplars), "--temperature", str(temperature)]
    assert recovery_cli.recipe_eval_flags({}) == expected


def test_generate_cli_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "causal.jsonl"
    argv = ["hypospace", "generate", "--domain", "causal", "--nodes", "3", "--observations", "1", "3"]
    assert _run([*argv, "--out", str(out)], monkeypatch) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 12 + 19
    assert records[0]["params"] == {"nodes": 3, "max_edges": 3, "observations": [1, 3]}
    assert all(set(r) == {"id", "domain", "params", "observations", "hypotheses"} for r in records)
    assert "" in records[0]["hypotheses"] and records[0]["observations"] == ["Perturb(A) -> A:0 B:0 C:0"]
    out = tmp_path / "boolean.jsonl"
    argv = ["hypospace", "generate", "--domain", "boolean", "--operators", "full", "--max-depth", "1"]
    assert _run([*argv, "--out", str(out)], monkeypatch) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0]["observations"] == ["(x=0, y=0) -> 0"] and "NOR(x,y)" not in records[0]["hypotheses"]
    assert "NOR(x,y)" in records[1]["hypotheses"]


@pytest.mark.parametrize(
    ("extra", "out", "message"),
    [
        (["--split", "test", "--limit", "1"], "ok.jsonl", "split 'test' of hypospace-causal .* is empty"),
        ([], ".", "is a directory; give a file path"),
        ([], "taken/instances.jsonl", "is not writable"),  # the parent is a file
    ],
)
def test_generate_cli_errors_are_clear(
    extra: list[str],
    out: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    (tmp_path / "taken").write_text("not a directory")
    argv = ["hypospace", "generate", "--domain", "causal", "--nodes", "3", *extra, "--out", str(tmp_path / out)]
    assert _run(argv, monkeypatch) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "ok.jsonl").exists()


# ---------------------------------------------------------------------------------------------------------
# A tiny real model end to end (numbers are meaningless; the pipeline must run and stay consistent)


@pytest.mark.slow
@pytest.mark.parametrize("style", ["chat", "base"])
def test_cli_with_a_tiny_local_model(
    style: str, tiny_qwen3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / style
    argv = ["eval", "recovery", "--model", str(tiny_qwen3), *VOXEL_ARGS, "--samples", "3", "--max-new-tokens", "6"]
    argv += ["--prompt-style", style, "--protocol", "sequential" if style == "base" else "parallel"]
    assert _run([*argv, "--save-completions", "--no-progress", "--out", str(out)], monkeypatch) == 0
    (model,) = json.loads((out / "recovery.json").read_text())["models"]
    assert model["prompt_style"] == style and model["n_instances"] == 2
    for record in model["instances"]:
        assert len(record["completions"]) == 3 and len(record["curve"]) == 3
        recomputed = [TASK.parse(c) for c in record["completions"]]
        assert record["proposals"] == recomputed
        assert all(0.0 <= v <= 1.0 for v in record["curve"])


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["parallel", "sequential"])
def test_exact_curve_through_the_real_transformers_sampler(
    protocol: str, tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokenizing, batching, slicing off the prompt, decoding and cutting at the stop marker are the real ones;
    only `model.generate` is replaced, by one that appends the token ids of scripted answers to each prompt."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    config = sampling.SamplingConfig(max_new_tokens=64, batch_size=4, stop=("\nEND",))
    sampler = sampling.TransformersSampler(model, tokenizer, config)
    # After the stop marker comes what a base model runs on with: an admissible answer, which must be cut
    # off (else "garbage" and "no idea" would read as valid and the curve would differ).
    runs_on = {inst.id: TASK.render_answer(inst.hypotheses[0]) for inst in INSTANCES}
    scripts = {id_: [f"{answer}\nEND\n{runs_on[id_]}" for answer in answers] for id_, answers in _scripts().items()}
    calls: list[tuple[int, int]] = []

    def generate(input_ids: torch.Tensor, num_return_sequences: int, pad_token_id: int, **kwargs: object):
        (criterion,) = kwargs["stopping_criteria"]
        assert criterion.stops == ("\nEND",) and kwargs["max_new_tokens"] == 64
        calls.append((len(input_ids), num_return_sequences))
        rows = []
        for ids in input_ids.tolist():
            instance = _instance_of(tokenizer.decode(ids), INSTANCES)
            for _ in range(num_return_sequences):
                answer = scripts[instance.id].pop(0)
                rows.append(ids + tokenizer(answer, add_special_tokens=False)["input_ids"])
        width = max(len(row) for row in rows)
        return torch.tensor([row + [pad_token_id] * (width - len(row)) for row in rows])

    monkeypatch.setattr(model, "generate", generate)
    result = evaluate_recovery(TASK, INSTANCES, sampler, 4, protocol, instances_per_call=4, progress=False)
    assert [r["curve"] for r in result["instances"]] == EXPECTED["per_instance_curves"]
    assert result["curve"]["mean"] == pytest.approx(EXPECTED["curve"])
    for metric in ("validity", "uniqueness", "recovery"):
        assert result[metric]["mean"] == pytest.approx(EXPECTED[metric])
    assert all(not script for script in scripts.values())
    assert calls == ([(1, 4)] * 4 if protocol == "parallel" else [(4, 1)] * 4)


def test_modal_share_counts_unreadable_samples_in_the_denominator_only() -> None:
    from divrl.tasks.hypospace.recovery import modal_share

    assert modal_share(["a", "a", "b", None]) == 0.5
    assert modal_share([None, None]) == 0.0 and modal_share(["x"]) == 1.0


def test_a_resumed_evaluation_draws_what_an_uninterrupted_one_draws(tiny_qwen3: Path) -> None:
    """Issue 29 item 9: a real sampler, killed after its first chunk, then resumed from what was recorded."""
    from divrl.sampling import SamplingConfig, TransformersSampler, load_for_sampling
    from divrl.tasks.hypospace.recovery import sample_instances

    model, tokenizer = load_for_sampling(str(tiny_qwen3), quantize="none", dtype="float32")
    sampler = TransformersSampler(model, tokenizer, SamplingConfig(max_new_tokens=6, seed=3))
    build = TASK.prompts_for("chat")

    def sample(**kwargs: Any) -> list[list[str]]:
        return sample_instances(INSTANCES, sampler, 4, "parallel", build, TASK.parse, instances_per_call=2,
                                progress=False, seed=3, **kwargs)

    uninterrupted = sample()
    recorded: dict[str, list[str]] = {}

    class Killed(Exception):
        pass

    def record_then_die(chunk: Sequence[Instance], completions: list[list[str]]) -> None:
        recorded.update(zip((i.id for i in chunk), completions, strict=True))
        raise Killed

    sampler.reseed(12345)  # whatever the stream was doing before the kill
    with pytest.raises(Killed):
        sample(on_chunk=record_then_die)
    assert len(recorded) == 2
    sampler.reseed(999)  # a new process seeds its own way
    assert sample(done=recorded) == uninterrupted
    assert sample(done={INSTANCES[0].id: recorded[INSTANCES[0].id]}) == uninterrupted  # a half-recorded chunk
    assert len({tuple(c) for c in uninterrupted}) > 1  # the draws do differ between chunks and instances
