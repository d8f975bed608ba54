"""No second command, corrupt file or kill inside the first save loses a run (issue 29, items 5-8): `divrl train`
refuses to train over a run unasked, resume skips a damaged newest checkpoint for the newest good one, a run whose
only checkpoint is incomplete starts again, and resuming a finished run trains nothing."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from divrl.cli import main as cli_main
from divrl.trainers.checkpoint import MANIFEST_FILE, incomplete_reason, last_complete_checkpoint, write_manifest

ROOT = Path(__file__).resolve().parents[2]
VOXEL_GRPO = ROOT / "recipes" / "embedded-cpu" / "hypospace-voxel" / "grpo.yaml"
SMALL = ["--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "8",
         "--logging_steps", "1", "--recovery_eval", "false"]


def _train(model: Path, out: Path, *extra: str) -> int:
    return cli_main(["train", str(VOXEL_GRPO), "--model_name_or_path", str(model), "--output_dir", str(out),
                     "--save_steps", "1", "--save_total_limit", "3", *SMALL, *extra])


def _checkpoint(folder: Path, step: int, manifest: bool = True) -> Path:
    """A checkpoint-STEP with the kinds of files a real one has, each readable."""
    from safetensors.torch import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 10}))
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(path / "adapter_model.safetensors"))
    torch.save({"state": torch.arange(64)}, path / "optimizer.pt")
    torch.save({"archive": torch.arange(8)}, path / "divrl_state.pt")
    if manifest:
        write_manifest(str(path))
    return path


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damaged", ["optimizer.pt", "adapter_model.safetensors", "divrl_state.pt"])
@pytest.mark.parametrize("manifest", [True, False], ids=["manifest", "legacy"])
def test_a_truncated_file_makes_the_newest_checkpoint_skipped_for_the_one_before(
        tmp_path: Path, damaged: str, manifest: bool, caplog: pytest.LogCaptureFixture) -> None:
    _checkpoint(tmp_path, 2, manifest)
    newest = _checkpoint(tmp_path, 4, manifest)
    assert incomplete_reason(str(newest)) is None
    _truncate(newest / damaged)
    assert damaged in (incomplete_reason(str(newest)) or "")
    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        assert last_complete_checkpoint(str(tmp_path), ["divrl_state.pt"]) == str(tmp_path / "checkpoint-2")
    (message,) = [r.getMessage() for r in caplog.records]
    assert "checkpoint-4" in message and damaged in message and "\n" not in message


def test_the_manifest_lists_every_file_but_itself(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, 1)
    files = json.loads((path / MANIFEST_FILE).read_text())["files"]
    assert set(files) == {"trainer_state.json", "adapter_model.safetensors", "optimizer.pt", "divrl_state.pt"}
    (path / "optimizer.pt").unlink()
    assert "optimizer.pt (0 of" in incomplete_reason(str(path))


@pytest.mark.slow
def test_train_refuses_a_folder_holding_a_run_unless_resumed_or_overwritten(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "1") == 0
    before = {p.name for p in out.iterdir()}
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 2
    err = capsys.readouterr().err
    assert str(out) in err and "--resume_from_checkpoint true" in err and "--overwrite_output_dir true" in err
    assert "Traceback" not in err and {p.name for p in out.iterdir()} == before  # nothing touched
    assert _train(tiny_qwen3, out, "--max_steps", "2", "--overwrite_output_dir", "true") == 0
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2


@pytest.mark.slow
def test_resuming_a_finished_run_trains_nothing_and_says_so(
        tiny_qwen3: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _train(tiny_qwen3, out, "--max_steps", "2") == 0
    final = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert _train(tiny_qwen3, out, "--max_steps", "2", "--resume_from_checkpoint", "true") == 0
    assert "nothing to do" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == final  # not a byte changed


@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_resumes_from_the_one_before(tiny_qwen3: Path, tmp_path: Path) -> None:
    uninterrupted, damaged = tmp_path / "uninterrupted", tmp_path / "damaged"
    assert _train(tiny_qwen3, uninterrupted, "--max_steps", "3") == 0
    assert _train(tiny_qwen3, damaged, "--max_steps", "2") == 0
    _truncate(damaged / "checkpoint-2" / "optimizer.pt")
    assert _train(tiny_qwen3, damaged, "--max_steps", "3", "--resume_from_checkpoint", "true") == 0
    final = json.loads((damaged / "trainer_state.json").read_text())
    assert final["global_step"] == 3
    from safetensors.torch import load_file

    a = load_file(uninterrupted / "adapter_model.safetensors")
    b = load_file(damaged / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # resumed from step 1, same end


@pytest.mark.slow
def test_a_run_whose_only_checkpoint_is_incomplete_starts_again(
        tiny_qwen3: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "run"
    (out / "checkpoint-1").mkdir(parents=True)  # what a kill inside the first save leaves: no trainer_state.json
    torch.save({}, out / "checkpoint-1" / "optimizer.pt")
    with caplog.at_level(logging.WARNING):
        assert _train(tiny_qwen3, out, "--max_steps", "1", "--resume_from_checkpoint", "true") == 0
    assert any("holds no complete checkpoint" in r.getMessage() and "training from scratch" in r.getMessage()
               for r in caplog.records)
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1


def test_evaluating_a_truncated_adapter_is_one_line(tiny_qwen3: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    adapter = tmp_path / "adapter"
    get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_qwen3), LoraConfig(r=2, target_modules="all-linear")
                   ).save_pretrained(adapter)
    _truncate(adapter / "adapter_model.safetensors")
    assert cli_main(["eval", "recovery", "--model", str(adapter), "--task", "hypospace-voxel", "--samples", "2",
                     "--limit", "4", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"model '{adapter}': adapter_model.safetensors truncated" in err and "Traceback" not in err
