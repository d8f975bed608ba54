"""No damaged file, full disk or second process loses a run (issue 44, R1-R8): every checkpoint damaged is refused
untouched, a method newly enabled on resume is refused, checksums catch same-size damage, a second process on an
output_dir refuses, an impossible max_completion_length is refused before training, and a save that runs out of
space says so, leaves the previous checkpoint to resume from and no partial one."""

from __future__ import annotations

import json
import logging
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from test_run_safety import _checkpoint, _train

from divrl.cli import main as cli_main
from divrl.run_lock import LOCK_FILE
from divrl.trainers.checkpoint import (
    MANIFEST_FILE,
    incomplete_reason,
    interrupted_first_save,
    last_complete_checkpoint,
    scan_checkpoints,
)

ROOT = Path(__file__).resolve().parents[2]


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ------------------------------------------------------------------------ R1: every checkpoint damaged
def test_only_a_single_unfinished_checkpoint_counts_as_an_interrupted_first_save(tmp_path: Path) -> None:
    unfinished = tmp_path / "a" / "checkpoint-1"
    unfinished.mkdir(parents=True)  # a kill inside the first save: no trainer_state.json, no manifest
    assert interrupted_first_save(scan_checkpoints(str(tmp_path / "a"))[1])
    for step in (1, 2):  # finished saves (manifests), then damaged
        (_checkpoint(tmp_path / "b", step) / "trainer_state.json").write_text("{bad")
    assert not interrupted_first_save(scan_checkpoints(str(tmp_path / "b"))[1])
    (_checkpoint(tmp_path / "c", 1) / "trainer_state.json").write_text("{bad")  # one finished save, damaged
    assert not interrupted_first_save(scan_checkpoints(str(tmp_path / "c"))[1])


@pytest.mark.slow
def test_a_run_whose_every_checkpoint_is_damaged_is_refused_untouched(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 0
    for step in (1, 2):
        (out / f"checkpoint-{step}" / "trainer_state.json").write_text("{bad")
    before = _tree(out)
    capsys.readouterr()
    assert _train(tiny_qwen3, out, "--max_steps", "3", "--resume_from_checkpoint", "true") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "every checkpoint" in line and "checkpoint-1: unreadable trainer_state.json" in line
    assert "checkpoint-2: unreadable trainer_state.json" in line and "--overwrite_output_dir true" in line
    assert "first save" not in line
    assert _tree(out) == before  # nothing touched


# ------------------------------------------------------------------------ R2: a method enabled on resume
@pytest.mark.slow
def test_resuming_with_qd_newly_enabled_is_refused_by_name(tiny_qwen3: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "1") == 0
    capsys.readouterr()
    assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true", "--qd", "true") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "checkpoint-1" in line and "without qd" in line and "--qd True" in line and "archives" in line
    assert not (out / "checkpoint-2").exists()


# ------------------------------------------------------------------------ R3: fit-law on a file
def test_fit_law_on_a_file_says_it_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text("{}")
    assert cli_main(["fit-law", str(path)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"'{path}' is a file" in line and "does not exist" not in line


# ------------------------------------------------------------------------ R4, R5: manifest shape, checksums
@pytest.mark.parametrize("manifest", ['{"files": []}', "[]", '{"files": {"optimizer.pt": "big"}}', "{bad"])
def test_a_manifest_of_the_wrong_shape_counts_as_damaged(tmp_path: Path, manifest: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    (newest / MANIFEST_FILE).write_text(manifest)
    assert MANIFEST_FILE in (incomplete_reason(str(newest)) or "")
    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-1")
    (message,) = [r.getMessage() for r in caplog.records]
    assert "checkpoint-2" in message and MANIFEST_FILE in message and "\n" not in message


def _garble_in_place(path: Path, offset_from_end: int, data: bytes) -> None:
    """Overwrite bytes near the end of `path` without changing its size (a bit flip, a bad sector)."""
    size = path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(size - offset_from_end)
        handle.write(data)
    assert path.stat().st_size == size


@pytest.mark.parametrize(("damaged", "data"), [
    ("divrl_state.pt", b"\xff" * 16),  # unpickling garbage
    ("adapter_model.safetensors", torch.tensor([float("nan")] * 4).numpy().tobytes()),  # NaN weights
])
def test_same_size_damage_is_caught_by_the_checksum(tmp_path: Path, damaged: str, data: bytes,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    recorded = json.loads((newest / MANIFEST_FILE).read_text())["files"]
    assert all(len(entry["sha256"]) == 64 for entry in recorded.values())
    _garble_in_place(newest / damaged, 200 if damaged.endswith(".pt") else 16, data)
    assert f"{damaged} (same size, other bytes" in (incomplete_reason(str(newest)) or "")
    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        assert last_complete_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-1")


def test_a_manifest_of_sizes_alone_still_checks_sizes(tmp_path: Path) -> None:
    """Manifests written before checksums ({name: size}) keep working."""
    folder = _checkpoint(tmp_path, 1)
    files = json.loads((folder / MANIFEST_FILE).read_text())["files"]
    (folder / MANIFEST_FILE).write_text(json.dumps({"files": {name: e["size"] for name, e in files.items()}}))
    assert incomplete_reason(str(folder)) is None
    (folder / "optimizer.pt").write_bytes(b"PK")
    assert "optimizer.pt (2 of" in incomplete_reason(str(folder))


@pytest.mark.slow
def test_a_garbled_state_file_resumes_from_the_checkpoint_before(tiny_qwen3: Path, tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 0
    _garble_in_place(out / "checkpoint-2" / "divrl_state.pt", 200, b"\xff" * 16)
    with caplog.at_level(logging.WARNING):
        assert _train(tiny_qwen3, out, "--max_steps", "3", "--resume_from_checkpoint", "true") == 0
    assert any("skipping incomplete checkpoint" in r.getMessage() and "checkpoint-2" in r.getMessage()
               and "divrl_state.pt (same size" in r.getMessage() for r in caplog.records)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3


# ------------------------------------------------------------------------ R6: a second process
HOLDER = textwrap.dedent("""
    import sys, time
    from divrl.run_lock import run_lock
    with run_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(600)
""")


@pytest.mark.slow
def test_a_second_process_on_the_same_output_dir_refuses_naming_the_holder(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert _train(tiny_qwen3, out, "--max_steps", "1") == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"pid {holder.pid}" in line and str(out) in line
        assert not any(out.glob("checkpoint-*"))
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock, nothing is left stuck
        holder.wait()
    assert _train(tiny_qwen3, out, "--max_steps", "1") == 0
    assert not (out / LOCK_FILE).exists()  # released and removed on a clean exit


# ------------------------------------------------------------------------ R7: max_completion_length
@pytest.mark.parametrize("length", ["1000000000", "2047"])
def test_a_completion_longer_than_the_context_is_refused_before_training(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], length: str) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "1", "--max_completion_length", length) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--max_completion_length on the command line (recipe" in line and f"is {length}" in line
    assert "context is 2048 tokens (max_position_embeddings)" in line  # the tiny Qwen3's
    if length == "2047":  # a prompt takes more than one token: the limit counts the longest one
        assert "the longest training prompt takes" in line
    assert not any(out.glob("checkpoint-*"))


# ------------------------------------------------------------------------ R8: a full disk during a save
def _assert_failed_save_then_resume(model: Path, out: Path, err: str, failed: int, kept: int, full: bool) -> None:
    line = _one_error_line(err)
    assert f"saving {out / f'checkpoint-{failed}'} failed" in line and "MiB free" in line
    assert f"checkpoint-{kept} is intact" in line and ("the disk is full" in line) == full
    assert not (out / f"checkpoint-{failed}").exists()  # no partial checkpoint for a resume to pick
    assert incomplete_reason(str(out / f"checkpoint-{kept}")) is None


@pytest.mark.slow
def test_a_write_failing_at_a_chosen_byte_during_a_save_is_one_line_and_resumable(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """RLIMIT_FSIZE makes the kernel refuse any write past a chosen byte of a file (EFBIG; Python ignores
    SIGXFSZ): checkpoint-2's save fails inside its largest file, as on a disk that fills up, on any POSIX machine."""
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "1") == 0
    largest = max(p.stat().st_size for p in (out / "checkpoint-1").iterdir())
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    capsys.readouterr()
    resource.setrlimit(resource.RLIMIT_FSIZE, (largest // 2, hard))
    try:
        code = _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert code == 2
    _assert_failed_save_then_resume(tiny_qwen3, out, capsys.readouterr().err, failed=2, kept=1, full=False)
    assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 0
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2


def _resize(disk: Path, size: int) -> None:
    """Resize the `small_tmpfs` (conftest) mounted at `disk` to `size` bytes."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(disk)], check=True)


@pytest.mark.slow
def test_a_disk_that_fills_up_during_a_save_is_one_line_and_resumable(
        tiny_qwen3: Path, tmp_path: Path, small_tmpfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sized = tmp_path / "sized"
    assert _train(tiny_qwen3, sized, "--max_steps", "1") == 0
    checkpoint = sum(p.stat().st_size for p in (sized / "checkpoint-1").rglob("*") if p.is_file())
    out = small_tmpfs / "run"
    _resize(small_tmpfs, int(checkpoint * 1.6) + (1 << 16))  # checkpoint-1 fits, checkpoint-2 does not
    capsys.readouterr()
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 2
    _assert_failed_save_then_resume(tiny_qwen3, out, capsys.readouterr().err, failed=2, kept=1, full=True)
    _resize(small_tmpfs, checkpoint * 8)  # space freed
    assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 0
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    assert os.path.isfile(out / "checkpoint-2" / MANIFEST_FILE)


# ------------------------------------------------------------------------ issue 57: no weights or optimizer
@pytest.mark.slow
@pytest.mark.parametrize(("removed", "reason"), [("adapter_model.safetensors", "no model weights (adapter_model"),
                                                 ("optimizer.pt", "no optimizer.pt")],
                         ids=["adapter", "optimizer"])
def test_a_newest_checkpoint_missing_its_weights_or_optimizer_resumes_from_the_one_before(
        tiny_qwen3: Path, tmp_path: Path, removed: str, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 0
    newest = out / "checkpoint-2"
    (newest / MANIFEST_FILE).unlink()  # a kill between the save and the manifest, or an older run
    (newest / removed).unlink()
    before = out / "checkpoint-1"
    kept = {name: (before / name).stat().st_mtime_ns for name in _tree(before)}
    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        assert _train(tiny_qwen3, out, "--max_steps", "3", "--resume_from_checkpoint", "true") == 0
    (warning,) = [r.getMessage() for r in caplog.records if "skipping incomplete checkpoint" in r.getMessage()]
    assert "checkpoint-2" in warning and reason in warning, warning
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 3
    # resumed from checkpoint-1: it is untouched (a run from scratch would have rewritten it), and step 2 was
    # trained and saved again (a resume from checkpoint-2 would have left it without the file and the manifest)
    assert {name: (before / name).stat().st_mtime_ns for name in _tree(before)} == kept
    assert (newest / removed).is_file() and (newest / MANIFEST_FILE).is_file()
    assert json.loads((newest / "trainer_state.json").read_text())["global_step"] == 2
    assert incomplete_reason(str(newest)) is None


def test_a_checkpoint_without_a_manifest_needs_its_weights_and_the_required_optimizer(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from divrl.trainers.checkpoint import OPTIMIZER_FILE, WEIGHT_FILES

    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 10}))
    required = [WEIGHT_FILES, OPTIMIZER_FILE]
    assert incomplete_reason(str(folder)) is None  # nothing required: what every resume checked before issue 57
    torch.save({"state": torch.arange(8)}, folder / OPTIMIZER_FILE)
    missing_weights = incomplete_reason(str(folder), required)
    assert missing_weights is not None and "model weights" in missing_weights and "optimizer" not in missing_weights
    (folder / OPTIMIZER_FILE).unlink()
    save_file({"w": torch.arange(8, dtype=torch.float32)}, str(folder / "adapter_model.safetensors"))
    missing_optimizer = incomplete_reason(str(folder), required)
    assert missing_optimizer is not None and OPTIMIZER_FILE in missing_optimizer
    assert "model weights" not in missing_optimizer
    assert incomplete_reason(str(folder), [WEIGHT_FILES]) is None  # save_only_model: no optimizer required
    torch.save({"state": torch.arange(8)}, folder / OPTIMIZER_FILE)
    assert incomplete_reason(str(folder), required) is None
    (folder / "adapter_model.safetensors").unlink()  # any one of the weight files will do
    save_file({"w": torch.arange(8, dtype=torch.float32)}, str(folder / "model.safetensors"))
    assert incomplete_reason(str(folder), required) is None
