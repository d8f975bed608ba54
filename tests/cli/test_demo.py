"""`divrl demo` end to end on a tiny local model: the main job's pipeline runs and writes its report."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_trains_evaluates_and_reports(tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from divrl import demo, memory, train
    from divrl.cli import main
    from divrl.toy import overview

    calls = []  # memory hygiene (issue 12): large frees unmapped from the start, memory released after each phase

    def spy(module: object, name: str, label: str) -> None:
        function = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *args: calls.append(label) or function(*args))

    spy(memory, "return_large_frees_to_os", "unmap large frees")
    spy(memory, "release_freed_memory", "release")
    spy(train, "main", "train")
    trained_tasks = []  # each training's task parameters: the ones the evaluation uses
    build_task = train.build_task
    monkeypatch.setattr(train, "build_task", lambda name, **params: trained_tasks.append((name, params))
                        or build_task(name, **params))
    monkeypatch.setattr(overview, "STEPS", {"bandit": 30, "hypergrid": 30})  # the figure and table, not convergence
    out = tmp_path / "demo"
    code = main(["demo", "--model", str(tiny_qwen3), "--steps", "1", "--instances", "4", "--samples", "2",
                 "--skip-molecules", "--out", str(out)])  # the molecule phase: its own test below
    assert code == 0
    progress = capsys.readouterr().out
    assert "[1/6] toy comparison" in progress and "[2/6] preparing" in progress
    assert "[6/6] writing the report" in progress
    assert "step 1/1  validity" in progress and "{'loss'" not in progress  # one compact line per training step
    assert (out / "toy.png").stat().st_size > 0 and (out / "grpo" / "metrics.jsonl").is_file()
    recovery = json.loads((out / "eval" / "recovery.json").read_text())
    assert [m["label"] for m in recovery["models"]] == [f"{tiny_qwen3} (base)", "grpo", "ips"]
    assert [m["model"] for m in recovery["models"]] == [str(tiny_qwen3), str(out / "grpo"), str(out / "ips")]
    assert all(len(m["curve"]["mean"]) == 2 for m in recovery["models"])
    report = (out / "report.md").read_text()
    assert report.count("\n| ") >= 3 + 2  # a row per model and per trained method
    assert "Wall time: toy" in report and (out / "eval" / "recovery.png").stat().st_size > 0
    assert (out / "training.png").stat().st_size > 0 and "modal share" in report and "hypospace-boolean" in report
    assert "Peak memory (resident set size of the demo process): " in report
    assert report.index("Toy environments") < report.index("| grpo |") < report.index("beside the committed")
    assert report.count("| hypergrid (30 steps) |") == len(overview.METHODS)
    held_out = json.loads((out / "held_out.json").read_text())
    assert list(held_out["models"]) == ["base", "grpo", "ips"] and held_out["seed"] == 42
    assert calls == ["unmap large frees", "release", "train", "release", "train", "release"]
    for method in ("grpo", "ips"):
        assert (out / method / "adapter_model.safetensors").is_file()
        card = (out / method / "README.md").read_text()  # the held-out numbers, above the training batch's
        assert card.index("## Held-out evaluation (divrl demo, after training)") < card.index("## Metrics at save")
        assert f"| RR@2 | {held_out['models'][method]['rr']:.4g} |" in card
        assert str(demo.RECIPES) not in card  # the recipe by its path from the working folder (the repository)
        assert f"\n# {method}: " in card and f"model_name: {method}\n" in card  # not the final save's staging folder
    assert len(trained_tasks) == 2
    assert all(name == "hypospace-boolean" and demo.BOOLEAN.items() <= params.items() for name, params in trained_tasks)
    # `make demo` twice: the second run trains afresh into the same folder instead of refusing it as a run to resume
    assert main(["demo", "--model", str(tiny_qwen3), "--steps", "1", "--instances", "4", "--samples", "2",
                 "--skip-molecules", "--out", str(out)]) == 0


@pytest.mark.slow
def test_the_molecule_phase_spends_one_budget_per_arm_and_reports(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped chemical LM on the PMO oracle at a small budget, one seed: every arm spends exactly the budget."""
    from divrl.tasks.molecules import clm_demo

    monkeypatch.setattr(clm_demo, "BUDGET", 64)
    result = clm_demo.run_phase(tmp_path, seeds=(0,), progress=lambda _: None)
    assert [len(result["histories"][arm][0]) for arm in clm_demo.ARMS] == [64, 64, 64]
    assert all(len({smiles for smiles, _ in runs[0]}) == 64 for runs in result["histories"].values())
    lines = clm_demo.report_lines(result)
    assert any(line.startswith("| ips |") for line in lines) and (tmp_path / "molecules.png").stat().st_size > 0


@pytest.mark.parametrize("flag", ["--steps", "--prompts-per-step", "--instances", "--samples", "--learning-rate"])
def test_demo_refuses_a_budget_that_is_not_positive(flag: str, tmp_path: Path) -> None:
    from divrl.cli import main

    with pytest.raises(SystemExit, match="must be >= 1"):
        main(["demo", flag, "0", "--out", str(tmp_path)])


def _committed(tmp_path: Path, settings: dict) -> Path:
    stat = {"mean": 0.5, "ci_low": 0.4, "ci_high": 0.6, "min": 0.35, "max": 0.62, "n": 5}
    path = tmp_path / "demo_seeds.json"
    path.write_text(json.dumps({
        "settings": settings, "seeds": [42, 43, 44, 45, 46], "commit": "abc1234", "date": "2026-11-26T00:00:00",
        "models": {m: dict.fromkeys(["validity", "rr", "distinct_valid", "modal_share"], stat)
                   for m in ("base", "grpo", "ips")},
        "paired": {"ips - grpo": dict.fromkeys(["validity", "rr"], stat)}}))
    return path


def test_the_run_is_read_against_the_committed_result_of_its_own_settings(tmp_path: Path) -> None:
    from divrl.cli import build_parser
    from divrl.demo import demo_settings, evidence_lines

    args = build_parser().parse_args(["demo"])
    settings = demo_settings(args)
    numbers = {m: {"validity": 0.5, "rr": 0.25, "distinct_valid": 1.0, "modal_share": 0.7} for m in ("base", "grpo")}
    numbers["ips"] = {"validity": 0.625, "rr": 0.5, "distinct_valid": 1.5, "modal_share": 0.5}
    lines = evidence_lines(settings, 42, numbers, _committed(tmp_path, settings))
    assert any("seed 42, one of them" in line for line in lines)
    assert "| ips | RR@N | 0.500 | 0.500 [0.400, 0.600] | 0.350 to 0.620 |" in lines
    assert "| ips - grpo (paired by seed) | RR@N | +0.250 | +0.500 [+0.400, +0.600] | +0.350 to +0.620 |" in lines
    other = evidence_lines({**settings, "steps": 99}, 42, numbers, _committed(tmp_path, settings))
    assert "differ in steps" in other[-1] and not any(line.startswith("| ips") for line in other)
    assert "demo_seeds.py` writes it" in evidence_lines(settings, 42, numbers, tmp_path / "absent.json")[-1]


def test_the_toy_phase_does_not_warn_about_the_entropy_target_it_chose_itself(caplog: pytest.LogCaptureFixture) -> None:
    from divrl.toy.cli import build_env
    from divrl.toy.options import ENV_DEFAULTS
    from divrl.toy.overview import overview_config
    from divrl.toy.runner import TrainConfig, train

    env, steps, logger = build_env("bandit", {}), 150, "divrl.methods.maxent_entropy"  # seed 42 warns at step 115

    def maxent_warnings() -> list[str]:
        return [record.getMessage() for record in caplog.records if record.name == logger]

    with caplog.at_level(logging.WARNING, logger=logger):
        train(env, "maxent", replace(TrainConfig(**ENV_DEFAULTS["bandit"]), steps=steps), [42])
        assert any("far below its target" in message for message in maxent_warnings())  # the toy's own target
        caplog.clear()
        train(env, "maxent", overview_config("bandit", steps), [42])
    assert maxent_warnings() == []
