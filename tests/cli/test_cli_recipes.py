"""Issue 60, point 3: the recipes ship inside the package; `divrl recipes` lists and copies them, and `divrl train`
finds one by name from any folder (tests/project/test_packaging.py runs that from a wheel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from divrl.cli import main as cli_main
from divrl.shipped_recipes import RECIPES, copy_recipe, recipe_names, resolve_recipe
from divrl.train import read_command_line

CHECKOUT_RECIPES = Path(__file__).resolve().parents[2] / "recipes"
NAME = "embedded-cpu/hypospace-boolean/ips"


def test_the_package_holds_every_recipe_of_the_checkout() -> None:
    checkout = sorted(p.relative_to(CHECKOUT_RECIPES).with_suffix("").as_posix()
                      for p in CHECKOUT_RECIPES.rglob("*.yaml"))
    assert len(checkout) > 100 and recipe_names() == checkout
    assert (RECIPES / "README.md").read_text() == (CHECKOUT_RECIPES / "README.md").read_text()


@pytest.mark.parametrize("spelling", [NAME, f"{NAME}.yaml", f"recipes/{NAME}.yaml"])
def test_a_shipped_recipe_resolves_by_name_from_any_folder(spelling: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Path(resolve_recipe(spelling)) == RECIPES / f"{NAME}.yaml"
    args, config_path, recipe, _ = read_command_line(["--config", spelling, "--max_steps", "2"])
    assert args[1] == config_path == str(RECIPES / f"{NAME}.yaml") and recipe["ips"] is True


def test_a_file_of_the_same_name_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes" / NAME).parent.mkdir(parents=True)
    (tmp_path / "recipes" / f"{NAME}.yaml").write_text("ips: false\n")
    assert resolve_recipe(f"recipes/{NAME}.yaml") == f"recipes/{NAME}.yaml"


def test_an_unknown_name_is_one_line_naming_close_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", "embedded-cpu/hypospace-boolen/ips", "--dry_run", "true"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "recipe file 'embedded-cpu/hypospace-boolen/ips' does not exist and is no shipped recipe's name" in line
    assert f"close names: {NAME}," in line and str(RECIPES / "README.md") in line and "divrl recipes" in line


def test_divrl_recipes_lists_and_copies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["recipes"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[:len(recipe_names())] == recipe_names()
    assert cli_main(["recipes", "list", "boolean/ips"]) == 0
    assert NAME in capsys.readouterr().out.splitlines()
    assert cli_main(["recipes", "copy", NAME, str(tmp_path)]) == 0
    assert (tmp_path / "ips.yaml").read_bytes() == (RECIPES / f"{NAME}.yaml").read_bytes()
    assert cli_main(["recipes", "copy", NAME, str(tmp_path / "ips.yaml")]) == 2  # nothing is overwritten
    assert "already exists" in capsys.readouterr().err
    assert copy_recipe(NAME, tmp_path / "mine" / "b.yaml") == tmp_path / "mine" / "b.yaml"
    assert cli_main(["recipes", "list", "no-such-family"]) == 2
