"""`divrl demo` end to end on a tiny local model: the main job's pipeline runs and writes its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
def test_demo_trains_evaluates_and_reports(tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from divrl import demo, memory, train
    from divrl.cli import main

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
    out = tmp_path / "demo"
    code = main(["demo", "--model", str(tiny_qwen3), "--steps", "1", "--instances", "4", "--samples", "2",
                 "--out", str(out)])
    assert code == 0
    progress = capsys.readouterr().out
    assert "[1/5] preparing" in progress and "[5/5] writing the report" in progress
    recovery = json.loads((out / "eval" / "recovery.json").read_text())
    assert [m["label"] for m in recovery["models"]] == [f"{tiny_qwen3} (base)", "grpo", "ips"]
    assert [m["model"] for m in recovery["models"]] == [str(tiny_qwen3), str(out / "grpo"), str(out / "ips")]
    assert all(len(m["curve"]["mean"]) == 2 for m in recovery["models"])
    report = (out / "report.md").read_text()
    assert report.count("\n| ") >= 3 + 2  # a row per model and per trained method
    assert "Wall time: prepare" in report and (out / "eval" / "recovery.png").stat().st_size > 0
    assert (out / "training.png").stat().st_size > 0 and "modal share" in report and "hypospace-boolean" in report
    assert "Peak memory (resident set size of the demo process): " in report
    assert calls == ["unmap large frees", "release", "train", "release", "train", "release"]
    for method in ("grpo", "ips"):
        assert (out / method / "adapter_model.safetensors").is_file()
    assert len(trained_tasks) == 2
    assert all(name == "hypospace-boolean" and demo.BOOLEAN.items() <= params.items() for name, params in trained_tasks)
    # `make demo` twice: the second run trains afresh into the same folder instead of refusing it as a run to resume
    assert main(["demo", "--model", str(tiny_qwen3), "--steps", "1", "--instances", "4", "--samples", "2",
                 "--out", str(out)]) == 0


@pytest.mark.parametrize("flag", ["--steps", "--prompts-per-step", "--instances", "--samples", "--learning-rate"])
def test_demo_refuses_a_budget_that_is_not_positive(flag: str, tmp_path: Path) -> None:
    from divrl.cli import main

    with pytest.raises(SystemExit, match="must be >= 1"):
        main(["demo", flag, "0", "--out", str(tmp_path)])
