"""Recipe validation: one line naming the field and the recipe file, before the model loads (issue 14 item 10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from divrl.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "recipes" / "embedded-cpu"


def _recipe(tmp_path: Path, source: str, **changes: Any) -> Path:
    settings = {**yaml.safe_load((CPU / source).read_text()), **changes}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.fixture
def no_model_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every check below must fail before a model loads."""
    import divrl.models
    import divrl.train

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was loaded before the recipe was checked")

    monkeypatch.setattr(divrl.models, "load_model_and_tokenizer", refuse)
    monkeypatch.setattr(divrl.train, "dry_run_model", refuse)


def _one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert cli_main(["train", *argv]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "usage:" not in captured.err and "Traceback" not in captured.err, captured.err
    return lines[0]


@pytest.mark.parametrize(
    "source, changes, field, problem",
    [
        ("hypospace-voxel/ips.yaml", {"task_args": [1, 2]}, "task_args", "must be a mapping"),
        ("hypospace-voxel/ips.yaml", {"instance_limit": 0}, "instance_limit", "positive integer"),
        ("hypospace-voxel/ips.yaml", {"instance_limit": "many"}, "instance_limit", "must be an integer"),
        ("hypospace-voxel/ips.yaml", {"prompt_style": "fancy"}, "prompt_style", "must be one of"),
        ("hypospace-voxel/ips.yaml", {"split": "validation"}, "split", "unknown split 'validation'"),
        ("molecules/ips.yaml", {"split": "test"}, "split", "only a 'train' split"),
        ("hypospace-boolean/qd.yaml", {"qd_dims": [10, 10]}, "qd_dims", "behaviour in 3"),
        ("hypospace-voxel/qd.yaml", {"qd_ranges": [0, 1]}, "qd_ranges", "in 2 dimensions"),
        ("hypospace-voxel/ips.yaml", {"temperature": 0}, "temperature", "finite number > 0"),
        ("hypospace-voxel/ips.yaml", {"temperature": float("nan")}, "temperature", "finite number > 0"),
        ("hypospace-voxel/ips.yaml", {"learning_rate": -1e-5}, "learning_rate", "finite number > 0"),
        ("hypospace-voxel/ips.yaml", {"learning_rate": float("nan")}, "learning_rate", "finite number > 0"),
        ("hypospace-voxel/ips.yaml", {"learning_rate": 0}, "learning_rate", "> 0 (0 trains nothing), got 0"),
        ("hypospace-voxel/ips.yaml", {"num_generations": 0}, "num_generations", "must be >= 2"),
        ("hypospace-voxel/ips.yaml", {"num_generations": 1}, "num_generations", "must be >= 2"),
        ("hypospace-voxel/ips.yaml", {"num_generations": -4}, "num_generations", "must be >= 2"),
        ("hypospace-voxel/ips.yaml", {"learning_rate": "fast"}, "learning_rate", "must be a number"),
        ("hypospace-voxel/ips.yaml", {"save_steps": 0}, "save_steps", "must be > 0"),
        ("hypospace-voxel/ips.yaml", {"num_generations": "eight"}, "num_generations", "must be an integer"),
        ("hypospace-voxel/ips.yaml", {"num_generations": [8]}, "num_generations", "must be an integer"),
        ("hypospace-voxel/ips.yaml", {"ips": "maybe"}, "ips", "must be true/false"),
        ("hypospace-voxel/ips.yaml", {"dtype": "float64"}, "dtype", "must be one of"),
    ],
)
def test_bad_recipe_values_are_one_line_naming_field_and_file(
    source: str, changes: dict, field: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    no_model_load: None,
) -> None:
    recipe = _recipe(tmp_path, source, output_dir=str(tmp_path / "run"), **changes)
    line = _one_line_error(capsys, str(recipe))
    assert f"recipe {recipe}: {field} " in line and problem in line


def test_output_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], no_model_load: None) -> None:
    (tmp_path / "taken").write_text("a file")
    for output_dir, problem in [(tmp_path / "taken", "is an existing file"),
                                (tmp_path / "taken" / "run", "lies under")]:
        recipe = _recipe(tmp_path, "hypospace-voxel/ips.yaml", output_dir=str(output_dir))
        line = _one_line_error(capsys, str(recipe))
        assert f"recipe {recipe}: output_dir " in line and problem in line


def test_unknown_field_suggests_the_field_not_an_api_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_model_load: None
) -> None:
    recipe = _recipe(tmp_path, "hypospace-voxel/ips.yaml", learnin_rate=1e-5)
    line = _one_line_error(capsys, str(recipe))
    assert f"recipe {recipe}: learnin_rate is not a recipe field; did you mean 'learning_rate'?" in line
    assert "fail_with_unknown_args" not in line


def test_command_line_values_are_checked_and_named_as_such(
    capsys: pytest.CaptureFixture[str], no_model_load: None
) -> None:
    recipe = str(CPU / "hypospace-voxel" / "ips.yaml")
    line = _one_line_error(capsys, recipe, "--learning_rate", "-1")
    assert line.startswith("divrl train: error: --learning_rate on the command line") and recipe in line
    line = _one_line_error(capsys, recipe, "--num_generations", "eight")
    assert "--num_generations" in line and "invalid int value: 'eight'" in line
    line = _one_line_error(capsys, recipe, "--num_generations", "0")  # was a ZeroDivisionError traceback
    assert line.startswith("divrl train: error: --num_generations on the command line") and "must be >= 2" in line
    line = _one_line_error(capsys, recipe, "--learning_rate", "0")
    assert line.startswith("divrl train: error: --learning_rate on the command line") and "> 0" in line


def test_shipped_recipes_pass_the_checks() -> None:
    """Every shipped recipe's fields are known and of the right type (values need the hardware: not parsed here)."""
    from trl import ModelConfig, TrlParser

    from divrl.recipe_checks import RecipeOrigin, check_recipe_types
    from divrl.train import TrainScriptArguments
    from divrl.trainers.config import DivRLConfig

    types = (TrainScriptArguments, DivRLConfig, ModelConfig)
    parser = TrlParser(types)
    recipes = sorted((ROOT / "recipes").glob("*/*/*.yaml"))
    assert len(recipes) > 100
    for path in recipes:
        recipe = yaml.safe_load(path.read_text())
        check_recipe_types(parser, types, recipe, RecipeOrigin.of(str(path), recipe, []))
