"""One run per folder, of one kind (issue 57, items 4-5): `divrl sft` holds the output_dir lock as `divrl train` does,
a folder records which command's run it holds and each command refuses the other's (a folder from before the record
by what its trainer states log), and a refused `accelerate launch` ends every rank on the one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_run_hazards import HOLDER, _one_error_line, _tree
from test_run_safety import SMALL, VOXEL_GRPO, _train
from test_train_entry import _free_port

from divrl.cli import main as cli_main
from divrl.run_lock import LOCK_FILE, RUN_RECORD, run_kind
from divrl.train import check_output_dir

ROOT = Path(__file__).resolve().parents[2]
SFT_RECIPE = ROOT / "recipes" / "sft" / "hypospace-voxel.yaml"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _held_run(folder: Path, logged: dict[str, float] | None = None, kind: str | None = None) -> Path:
    """A folder holding a run: checkpoint-1 whose trainer state logs `logged`, and RUN_RECORD naming `kind`."""
    (folder / "checkpoint-1").mkdir(parents=True)
    (folder / "checkpoint-1" / "trainer_state.json").write_text(json.dumps({"log_history": [logged or {}]}))
    if kind:
        (folder / RUN_RECORD).write_text(json.dumps({"kind": kind}))
    return folder


def _sft(model: Path, out: Path, *extra: str) -> int:
    return cli_main(["sft", str(SFT_RECIPE), "--model_name_or_path", str(model), "--output_dir", str(out),
                     "--instance_limit", "20", "--max_steps", "1", "--merge", "false", "--logging_steps", "1",
                     "--save_strategy", "steps", "--save_steps", "1", *extra])


# ------------------------------------------------------------------------ the record and what refuses
def test_a_folder_holding_the_other_kind_is_refused_even_resumed_until_overwritten(tmp_path: Path) -> None:
    out = _held_run(tmp_path / "run", kind="sft")
    with pytest.raises(ValueError, match=r"holds a `divrl sft` run \(recorded in .*\.divrl-run\.json\), which "
                                         r"`divrl train` must not resume.*--overwrite_output_dir true"):
        check_output_dir(str(out), True, False, kind="train")
    check_output_dir(str(out), False, True, kind="train")  # overwriting: allowed, and the folder now says so
    assert run_kind(str(out))[0] == "train"
    check_output_dir(str(out), True, False, kind="train")  # the same kind resumes


def test_a_folder_without_a_record_is_known_by_what_its_trainer_logged(tmp_path: Path) -> None:
    rl = _held_run(tmp_path / "rl", {"reward": 0.5, "loss": 0.1})
    sft = _held_run(tmp_path / "sft", {"mean_token_accuracy": 0.3, "loss": 0.1})
    assert run_kind(str(rl)) == ("train", f"{rl / 'checkpoint-1' / 'trainer_state.json'} logs reward")
    with pytest.raises(ValueError, match="holds a `divrl train` run .* logs reward"):
        check_output_dir(str(rl), True, False, kind="sft")
    with pytest.raises(ValueError, match="holds a `divrl sft` run .* logs mean_token_accuracy"):
        check_output_dir(str(sft), True, False, kind="train")
    unknown = _held_run(tmp_path / "unknown", {"loss": 0.1})  # nothing tells: only the kind-blind checks apply
    assert run_kind(str(unknown)) is None
    with pytest.raises(ValueError, match="already holds a run"):
        check_output_dir(str(unknown), False, False, kind="sft")
    check_output_dir(str(unknown), True, False, kind="sft")
    assert json.loads((unknown / RUN_RECORD).read_text()) == {"kind": "sft"}


def test_a_record_alone_refuses_nothing(tmp_path: Path) -> None:
    """A run that ended before its first save leaves only the record: nothing to lose, the other kind may start."""
    (tmp_path / RUN_RECORD).write_text(json.dumps({"kind": "sft"}))
    check_output_dir(str(tmp_path), False, False, kind="train")
    assert run_kind(str(tmp_path))[0] == "train"


# ------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_sft_into_a_finished_rl_run_is_refused_naming_it(tiny_qwen3: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "1") == 0
    assert json.loads((out / RUN_RECORD).read_text()) == {"kind": "train"}
    before = _tree(out)
    capsys.readouterr()
    for resume in ((), ("--resume_from_checkpoint", "true")):
        assert _sft(tiny_qwen3, out, *resume) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert line.startswith("divrl sft: error:") and f"holds a `divrl train` run (recorded in {out}" in line
    (out / RUN_RECORD).unlink()  # a run from before the record: known by its logged reward
    assert _sft(tiny_qwen3, out) == 2
    assert "holds a `divrl train` run" in _one_error_line(capsys.readouterr().err)
    before.pop(RUN_RECORD)
    assert _tree(out) == before  # no RL checkpoint touched


@pytest.mark.slow
def test_train_resuming_an_sft_folder_is_refused_naming_it(tiny_qwen3: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sft"
    assert _sft(tiny_qwen3, out) == 0
    assert (out / "checkpoint-1").is_dir() and json.loads((out / RUN_RECORD).read_text()) == {"kind": "sft"}
    before = _tree(out)
    capsys.readouterr()
    assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"holds a `divrl sft` run (recorded in {out}" in line and "--overwrite_output_dir true" in line
    assert _sft(tiny_qwen3, out) == 2  # and sft, like train, never starts from scratch over a run unasked
    assert "already holds a run (checkpoint-1" in _one_error_line(capsys.readouterr().err)
    assert _tree(out) == before


@pytest.mark.slow
def test_two_sft_runs_at_once_on_one_folder_the_second_refuses_naming_the_first(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sft"
    first = subprocess.Popen([sys.executable, "-m", "divrl.sft", "--config", str(SFT_RECIPE), "--model_name_or_path",
                              str(tiny_qwen3), "--output_dir", str(out), "--instance_limit", "20", "--max_steps",
                              "100000", "--merge", "false"], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not ((out / LOCK_FILE).is_file() and (out / LOCK_FILE).read_text().strip() == str(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, "the first sft never took the lock"
            time.sleep(0.2)
        assert _sft(tiny_qwen3, out) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert line.startswith("divrl sft: error:") and f"pid {first.pid}" in line and first.poll() is None
    finally:
        first.kill()
        first.wait()


@pytest.mark.slow
def test_a_refused_two_process_launch_prints_the_error_once_and_no_rank_traceback(tiny_qwen3: Path,
                                                                                 tmp_path: Path) -> None:
    """Each rank ends on the refusal at once with status 1, RANK 0 printing it. What remains is the launcher's own
    report: torchrun's agent logs the failure (and a SIGTERM to a rank still exiting when it looks, where timing has
    it so), raises ChildFailedError for any non-zero exit, `accelerate launch` re-raises it (a traceback of
    accelerate's and torch's frames), and its summary names the error from each rank's torchelastic error file."""
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        accelerate = Path(sys.executable).with_name("accelerate")
        done = subprocess.run([str(accelerate), "launch", "--config_file",
                               str(ROOT / "accelerate_configs" / "cpu_2proc.yaml"), "--main_process_port",
                               str(_free_port()), "-m", "divrl.train", "--config", str(VOXEL_GRPO),
                               "--model_name_or_path", str(tiny_qwen3), "--output_dir", str(out), "--max_steps", "1",
                               *SMALL], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    finally:
        holder.kill()
        holder.wait()
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    (line,) = [line for line in output.splitlines() if line.startswith("divrl.train: error:")]
    assert f"pid {holder.pid}" in line and str(out) in line
    assert "Signal 15" not in output and "exitcode  : 1" in output  # no rank reported killed, even when signalled
    assert output.count("Traceback") == 1 and "ChildFailedError" in output  # the launcher's, no rank's
    assert "divrl/train.py" not in output and "divrl/run_lock.py" not in output  # no frame of divrl's
    assert output.count(f"traceback : {line}") == 2  # the summary names the cause on both ranks
    assert not any(out.glob("checkpoint-*"))
