"""Bad input is one line naming the field and where it came from, never NaN weights, a silent choice or a traceback
(issue 29, item 11)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divrl.cli import main as cli_main
from divrl.train import parse_recipe

ROOT = Path(__file__).resolve().parents[2]
VOXEL = ROOT / "recipes" / "embedded-cpu" / "hypospace-voxel"
SMALL = ["--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "8",
         "--recovery_eval", "false", "--save_steps", "1"]


@pytest.mark.parametrize(("flag", "value", "problem"), [
    ("beta", "inf", "must be a finite number, got inf"),
    ("weight_decay", "inf", "must be a finite number, got inf"),
    ("epsilon", "nan", "must be a finite number, got nan"),
    ("max_grad_norm", "nan", "must be a finite number, got nan"),
    ("beta", "-0.1", "must be >= 0, got -0.1"),
    ("top_entropy_quantile", "2", "in [0, 1], got 2.0"),
])
def test_numbers_training_cannot_use_are_refused_by_name(flag: str, value: str, problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_recipe(["--config", str(VOXEL / "ips.yaml"), f"--{flag}", value])
    message = str(raised.value)
    assert message.startswith(f"--{flag} on the command line") and problem in message and "\n" not in message


def test_a_number_in_the_recipe_file_is_named_with_the_file(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text((VOXEL / "ips.yaml").read_text() + "weight_decay: .nan\n")
    with pytest.raises(ValueError, match=f"recipe {recipe}: weight_decay must be a finite number"):
        parse_recipe(["--config", str(recipe)])


def test_a_key_repeated_in_a_recipe_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "twice.yaml"
    recipe.write_text((VOXEL / "ips.yaml").read_text() + "learning_rate: 1.0\n")
    assert cli_main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err
    last_line = len(recipe.read_text().splitlines())
    assert str(recipe) in err and "'learning_rate' appears twice" in err and f"(line {last_line}, column 1)" in err
    assert err.strip().count("\n") == 0


def test_a_directory_given_as_recipe_or_train_prompts_is_named(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["train", str(tmp_path)]) == 2
    assert f"recipe file '{tmp_path}' is a directory" in capsys.readouterr().err
    assert cli_main(["train", str(VOXEL / "ips.yaml"), "--train_prompts", str(tmp_path)]) == 2
    assert f"--train_prompts on the command line (recipe {VOXEL / 'ips.yaml'}) '{tmp_path}' is a directory" in \
        capsys.readouterr().err


def test_an_invalid_choice_is_one_line_not_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli_main(["eval", "recovery", "--task", "nope", "--model", "m", "--out", "o"])
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "divrl eval recovery: error: argument --task: invalid choice: 'nope'" in err


@pytest.mark.slow
def test_resume_problems_name_the_checkpoint(tiny_qwen3: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    run = ["train", str(VOXEL / "qd.yaml"), "--model_name_or_path", str(tiny_qwen3), "--output_dir", str(out), *SMALL]
    assert cli_main([*run, "--max_steps", "1"]) == 0
    capsys.readouterr()
    # qd switched off on resume: the checkpoint's archives cannot be restored
    assert cli_main([*run, "--max_steps", "2", "--qd", "false", "--resume_from_checkpoint", "true"]) == 2
    (error,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert "checkpoint-1/divrl_state.pt" in error and "has qd state" in error
    # a damaged trainer state on an explicit resume path
    state = out / "checkpoint-1" / "trainer_state.json"
    state.write_text(state.read_text()[:20])
    assert cli_main([*run, "--max_steps", "2", "--resume_from_checkpoint", str(out / "checkpoint-1")]) == 2
    err = capsys.readouterr().err
    assert str(out / "checkpoint-1") in err and "unreadable trainer_state.json" in err
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1  # the run itself untouched
