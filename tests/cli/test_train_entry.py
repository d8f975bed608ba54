"""`divrl train` / `-m divrl.train`: bad input, dry runs (CPU-forced, isolated), resume, and two CPU processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from divrl.cli import main as cli_main
from divrl.train import DRY_RUN_SUBDIR, parse_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes"
VOXEL_IPS = RECIPES / "embedded-cpu" / "hypospace-voxel" / "ips.yaml"
GPU_RECIPE = RECIPES / "gemma-3-4b-it" / "hypospace-voxel" / "ips.yaml"
# Small enough that a tiny model trains a step in about a second.
SMALL = ["--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "8"]


def _train_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run `divrl train ARGV`, expect exit status 2 and return its one-line error."""
    assert cli_main(["train", *argv]) == 2
    return capsys.readouterr().err


def test_missing_recipe_file_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    err = _train_error(capsys, str(tmp_path / "nope.yaml"))
    assert "nope.yaml' does not exist" in err and "Traceback" not in err


@pytest.mark.parametrize(("text", "problem"), [("task: [voxel\nlr: 1", "is not valid YAML"),
                                               ("- just\n- a list", "must hold a YAML mapping")])
def test_malformed_recipe_is_named(text: str, problem: str, capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    assert problem in _train_error(capsys, str(recipe))


def test_report_to_without_its_package_is_refused_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.integrations

    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: [])
    with pytest.raises(ValueError, match="report_to 'tensorboard' needs its package.*pip install tensorboard"):
        parse_recipe(["--config", str(VOXEL_IPS), "--report_to", "tensorboard"])
    monkeypatch.setattr(transformers.integrations, "get_available_reporting_integrations", lambda: ["tensorboard"])
    assert parse_recipe(["--config", str(VOXEL_IPS), "--report_to", "tensorboard"])[1].report_to == ["tensorboard"]


def test_gpu_recipe_without_gpu_names_its_cpu_variant_and_flags() -> None:
    with pytest.raises(SystemExit) as raised:
        parse_recipe(["--config", str(GPU_RECIPE)])
    message = str(raised.value)
    assert str(RECIPES / "embedded-cpu" / "hypospace-voxel" / "ips.yaml") in message
    assert "--use_cpu true --bf16 false --dtype float32" in message and "-cpu.yaml" not in message


def test_module_entry_point_prints_one_line_for_bad_input(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "divrl.train", "--config", str(tmp_path / "nope.yaml")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1
    assert "divrl.train: error: recipe file" in done.stderr and "Traceback" not in done.stderr


def test_dry_run_forces_cpu_settings_and_its_own_directory(tmp_path: Path) -> None:
    script_args, config, model_args = parse_recipe(
        ["--config", str(GPU_RECIPE), "--dry_run", "--output_dir", str(tmp_path), "--resume_from_checkpoint", "true"])
    assert script_args.dry_run and config.use_cpu and not config.bf16 and model_args.dtype == "float32"
    assert config.output_dir == str(tmp_path / DRY_RUN_SUBDIR)
    assert config.max_steps == 1 and config.resume_from_checkpoint is None


@pytest.mark.slow
def test_gpu_recipe_dry_runs_on_the_cpu_without_touching_output_dir(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "checkpoint-7").mkdir()  # a real run's checkpoint: the dry run must leave it the latest
    assert cli_main(["train", str(GPU_RECIPE), "--dry_run", "true", "--output_dir", str(tmp_path),
                     "--gradient_accumulation_steps", "1", *SMALL]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"checkpoint-7", DRY_RUN_SUBDIR}
    assert (tmp_path / DRY_RUN_SUBDIR / "adapter_model.safetensors").is_file()
    assert not (tmp_path / DRY_RUN_SUBDIR / ".divrl.lock").exists()  # the run lock leaves no file
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("ok: dry run passed") and lines[-1].endswith(f"written to {tmp_path / DRY_RUN_SUBDIR}")
    assert sum("torch threads" in line for line in lines) <= 1  # said once (not at all when an earlier test chose)


@pytest.mark.slow
def test_resume_from_checkpoint_true_continues_the_run(tiny_qwen3: Path, tmp_path: Path) -> None:
    run = ["train", str(VOXEL_IPS), "--model_name_or_path", str(tiny_qwen3), "--output_dir", str(tmp_path),
           "--save_steps", "2", "--logging_steps", "1", *SMALL]
    assert cli_main([*run, "--max_steps", "2"]) == 0
    state_file = tmp_path / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    state["log_history"].insert(0, {"step": 0, "resume_marker": 1.0})  # survives only if training resumes
    state_file.write_text(json.dumps(state))
    assert cli_main([*run, "--max_steps", "3", "--resume_from_checkpoint", "true"]) == 0
    final = json.loads((tmp_path / "trainer_state.json").read_text())
    assert final["global_step"] == 3
    assert final["log_history"][0] == {"step": 0, "resume_marker": 1.0}
    assert [entry["step"] for entry in final["log_history"] if "loss" in entry] == [1, 2, 3]


def _free_port() -> int:
    """A TCP port nobody listens on now: concurrent launches on the default port 29500 join each other's groups."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_accelerate_two_cpu_processes_dry_run_a_recipe(tmp_path: Path) -> None:
    accelerate = Path(sys.executable).with_name("accelerate")
    command = [str(accelerate), "launch", "--config_file", str(ROOT / "accelerate_configs" / "cpu_2proc.yaml"),
               "--main_process_port", str(_free_port()),
               "-m", "divrl.train", "--config", str(VOXEL_IPS), "--dry_run", "true", "--output_dir", str(tmp_path),
               *SMALL]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    state = json.loads((tmp_path / DRY_RUN_SUBDIR / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert any("ips/distinct_outcomes" in entry for entry in state["log_history"])
