"""A run SIGKILLed inside a checkpoint save resumes (resume_from_checkpoint=True) to exactly the state of an
uninterrupted run: method state is written into the checkpoint before transformers rotates older checkpoints
away, atomically, and the latest checkpoint is skipped when its save did not finish."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from checkpoint_kill_script import MAX_STEPS, final_state, run
from close import EXACT, WEIGHT_PARTS, assert_close

ROOT = Path(__file__).resolve().parents[2]


def _kill_inside_save(model: Path, out: Path, point: str, step: int) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    script = ROOT / "tests" / "helpers" / "checkpoint_kill_script.py"
    done = subprocess.run([sys.executable, str(script), str(model), str(out), point, str(step)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == -9, f"expected SIGKILL, got {done.returncode}: {done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def uninterrupted(tiny_qwen3: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    return final_state(run(tiny_qwen3, tmp_path_factory.mktemp("uninterrupted")))


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after_rotation", "method_state"])
def test_kill_inside_the_save_then_resume_gives_the_uninterrupted_state(
        tiny_qwen3: Path, tmp_path: Path, uninterrupted: dict, point: str,
        caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    _kill_inside_save(tiny_qwen3, out, point, step=2)
    if point == "method_state":  # the kill left checkpoint-2 incomplete, checkpoint-1 untouched
        assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
        assert not (out / "checkpoint-2" / "trainer_state.json").exists()
        assert not (out / "checkpoint-2" / "divrl_state.pt").exists(), "a partial state file must never be visible"
    else:  # killed after rotation: checkpoint-2 already holds divrl's one state file, with every part of it
        assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
        state = torch.load(out / "checkpoint-2" / "divrl_state.pt", weights_only=True)
        assert state["population"] is not None and state["objective"] is not None and state["diversity"]["archives"]
        assert not [p.name for p in (out / "checkpoint-2").glob("*.pt") if p.name in ("population_state.pt",
                                                                                        "flowrl_log_z.pt")]

    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        resumed = run(tiny_qwen3, out, resume=True)
    skipped = [r.getMessage() for r in caplog.records if "skipping incomplete checkpoint" in r.getMessage()]
    if point == "method_state":
        assert len(skipped) == 1 and str(out / "checkpoint-2") in skipped[0] and "\n" not in skipped[0]
    else:
        assert skipped == []
    history = json.loads((out / f"checkpoint-{MAX_STEPS}" / "trainer_state.json").read_text())["log_history"]
    assert history and resumed.state.global_step == MAX_STEPS
    assert resumed.population.state.soups == 1  # the selection after step 4 ran in the resumed process
    assert_close(final_state(resumed), uninterrupted, tol=EXACT)


def test_resume_from_latest_skips_incomplete_checkpoints(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from divrl.trainers.checkpoint import last_complete_checkpoint

    def checkpoint(step: int, state: str | None, *files: str) -> None:
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if state is not None:
            (folder / "trainer_state.json").write_text(state)
        for name in files:
            if name.endswith(".pt"):
                torch.save({}, folder / name)  # a readable torch file: only the missing or cut-short ones count
            else:
                (folder / name).write_bytes(b"x")

    checkpoint(3, '{"global_step": 3}', "divrl_state.pt")
    checkpoint(10, '{"global_step": 10}', "divrl_state.pt")
    checkpoint(12, '{"global_step": 12}')              # method state missing (written after rotation, killed)
    checkpoint(20, '{"global_st', "divrl_state.pt")    # trainer_state.json cut short by the kill
    checkpoint(30, None, "divrl_state.pt.tmp")         # killed while writing the method state
    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        found = last_complete_checkpoint(str(tmp_path), ["divrl_state.pt"])
    assert found == str(tmp_path / "checkpoint-10")  # by step number, not by name order (3 < 10)
    messages = [r.getMessage() for r in caplog.records]
    assert [m.split(" (")[0].rsplit("-", 1)[1] for m in messages] == ["30", "20", "12"]
    assert "no divrl_state.pt" in messages[2] and "unreadable trainer_state.json" in messages[1]
    assert last_complete_checkpoint(str(tmp_path / "missing")) is None


def test_atomic_save_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from divrl.trainers.checkpoint import atomic_save

    target = tmp_path / "state.pt"
    atomic_save({"a": torch.arange(3)}, str(target))
    assert torch.equal(torch.load(target, weights_only=True)["a"], torch.arange(3))

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(OSError):
        atomic_save({"a": torch.zeros(2)}, str(target))
    assert torch.equal(torch.load(target, weights_only=True)["a"], torch.arange(3)), "the old file survives"


@pytest.mark.slow
def test_a_checkpoint_in_the_three_file_layout_resumes_to_the_uninterrupted_state(
        tiny_qwen3: Path, tmp_path: Path, uninterrupted: dict) -> None:
    """tests/golden/legacy-checkpoint-2: step 2 of this run as divrl wrote it before the method-registry redesign
    (issue 30): `divrl_state.pt`, `population_state.pt` and `flowrl_log_z.pt` beside the Trainer's files, no
    manifest. However method state is stored later, such a checkpoint must keep resuming. Its steps 1-2 ran on the
    machine that recorded it, so the state matches within `close.NUMBERS` and `close.WEIGHTS`, not bit for bit."""
    import shutil

    out = tmp_path / "run"
    shutil.copytree(ROOT / "tests" / "golden" / "legacy-checkpoint-2", out / "checkpoint-2")
    resumed = run(tiny_qwen3, out, resume=True)
    assert resumed.state.global_step == MAX_STEPS
    assert_close(final_state(resumed), uninterrupted, parts=WEIGHT_PARTS)


@pytest.mark.slow
@pytest.mark.parametrize(("point", "step"), [("optimizer", 2), ("manifest", 2), ("method_state", 1)],
                         ids=["optimizer cut short", "before the manifest", "inside the first save"])
def test_a_kill_at_any_point_of_a_save_resumes_to_the_uninterrupted_state(
        tiny_qwen3: Path, tmp_path: Path, uninterrupted: dict, point: str, step: int) -> None:
    """With save_total_limit=1 a kill inside step 2's save leaves checkpoint-1 (rotation comes last) or a complete
    checkpoint-2 without manifest; a kill inside the first save leaves nothing complete, and the run starts again."""
    out = tmp_path / "run"
    _kill_inside_save(tiny_qwen3, out, point, step=step)
    resumed = run(tiny_qwen3, out, resume=True)
    assert resumed.state.global_step == MAX_STEPS
    assert_close(final_state(resumed), uninterrupted, tol=EXACT)
