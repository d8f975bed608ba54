"""A disk that fills up inside ANY file of a save is one line and loses nothing (issue 57): a real small filesystem
(tmpfs) is sized so that it fills inside each file of a checkpoint in turn, then inside each file of the final save;
every time the run ends with one `error:` line, leaves no partial checkpoint or final file, and a resume once space is
freed finishes the run (for the final save: writes it from the last checkpoint)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_run_hazards import _one_error_line, _resize
from test_run_safety import _train

import divrl.trainers.checkpoint as checkpoint_module
from divrl.trainers.checkpoint import FINAL_STAGING, MANIFEST_FILE, TRAINER_STATE_FILE, incomplete_reason

PAGE = 4096  # tmpfs charges whole pages of file data; folders and empty files cost none


def _pages(size: int) -> int:
    return -(-size // PAGE) * PAGE


def _in_write_order(folder: Path) -> list[tuple[str, int]]:
    """(name, size) of the files directly in `folder`, in the order their writes finished."""
    files = [path for path in folder.iterdir() if path.is_file()]
    return [(path.name, path.stat().st_size) for path in sorted(files, key=lambda path: path.stat().st_mtime_ns)]


def _fill_inside(before: list[tuple[str, int]], target: tuple[str, int]) -> int:
    """Bytes of data that fit: every file written before `target`, then half of it (its first page when it has one)."""
    return sum(_pages(size) for _, size in before) + _pages(target[1]) // 2 // PAGE * PAGE


def _partial_files(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """What the failed checkpoint held (name -> size) when divrl removed it."""
    seen: dict[str, int] = {}
    save_failure = checkpoint_module.save_failure

    def recording(checkpoint: str, *args: Any) -> Any:
        seen.update((path.name, path.stat().st_size) for path in Path(checkpoint).iterdir() if path.is_file())
        return save_failure(checkpoint, *args)

    monkeypatch.setattr(checkpoint_module, "save_failure", recording)
    return seen


@pytest.fixture(scope="module")
def reference(tiny_qwen3: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-step run (checkpoint every step) whose files say what each save writes, in which order."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 0
    return out


def _copy_run(reference: Path, out: Path, checkpoints: list[int]) -> int:
    """`reference`'s run record and checkpoints into `out`; the data bytes a resume needs before it saves."""
    out.mkdir()
    shutil.copy(reference / ".divrl-run.json", out)
    for step in checkpoints:
        shutil.copytree(reference / f"checkpoint-{step}", out / f"checkpoint-{step}")
    return sum(_pages(path.stat().st_size) for path in out.rglob("*") if path.is_file()) + PAGE  # + the lock's pid


@pytest.mark.slow
def test_a_disk_that_fills_inside_any_file_of_a_checkpoint_is_one_line_and_resumable(
        tiny_qwen3: Path, reference: Path, small_tmpfs: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    files = [entry for entry in _in_write_order(reference / "checkpoint-2") if entry[0] != MANIFEST_FILE]
    hit: list[int] = []
    for index, target in enumerate(files):
        _resize(small_tmpfs, 256 << 20)
        out = small_tmpfs / f"run-{index}"
        used = _copy_run(reference, out, [1])
        _resize(small_tmpfs, used + _fill_inside(files[:index], target))
        partial = _partial_files(monkeypatch)
        capsys.readouterr()
        assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 2, target
        line = _one_error_line(capsys.readouterr().err)
        assert f"saving {out / 'checkpoint-2'} failed: the disk is full" in line and "checkpoint-1 is intact" in line
        assert not (out / "checkpoint-2").exists() and incomplete_reason(str(out / "checkpoint-1")) is None
        hit.append(sum(partial.values()))
        _resize(small_tmpfs, 256 << 20)  # space freed
        assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 0, target
        assert json.loads((out / TRAINER_STATE_FILE).read_text())["global_step"] == 2
        shutil.rmtree(out)
    # the point where the disk filled moved through the whole save: what the partial checkpoint held when it was
    # removed grows from (nearly) nothing to (nearly) all of it (files written within one clock tick share an mtime,
    # so the order sizes target is the reference's, up to such ties)
    total = sum(size for _, size in files)
    assert hit == sorted(hit) and hit[0] < files[0][1] + PAGE and hit[-1] > 0.9 * total, (hit, total)


@pytest.mark.slow
def test_a_disk_that_fills_inside_any_file_of_the_final_save_is_one_line_and_the_resume_writes_it(
        tiny_qwen3: Path, reference: Path, small_tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final = [entry for entry in _in_write_order(reference) if entry[0] != ".divrl-run.json"]
    assert final[-1][0] == TRAINER_STATE_FILE  # moved into place last: its presence says the final save is whole
    for index, target in enumerate(final):
        _resize(small_tmpfs, 256 << 20)
        out = small_tmpfs / f"run-{index}"
        used = _copy_run(reference, out, [1, 2])
        _resize(small_tmpfs, used + _fill_inside(final[:index], target))
        capsys.readouterr()
        assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 2, target
        line = _one_error_line(capsys.readouterr().err)
        assert f"saving the final model into {str(out)!r} failed: the disk is full" in line, line
        assert "checkpoint-2 holds the trained weights" in line
        assert sorted(path.name for path in out.iterdir()) == [".divrl-run.json", "checkpoint-1",
                                                               "checkpoint-2"]  # nothing partial, no lock left
        assert not (out / FINAL_STAGING).exists()
        _resize(small_tmpfs, 256 << 20)
        assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 0
        assert "final save is missing: writing it from" in capsys.readouterr().out
        for name, _ in final:  # the final save a finished run writes, the same weights
            if name.endswith(".safetensors"):
                assert (out / name).read_bytes() == (reference / name).read_bytes(), name
        assert {name for name, _ in final} <= {path.name for path in out.iterdir()}
        shutil.rmtree(out)
