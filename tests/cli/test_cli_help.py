"""Issue 60, point 4: `divrl --help`, `divrl train --help` and `divrl methods` read the method registry's shipped index
instead of importing torch, transformers or TRL, and no help line is cut short."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from divrl import settings_help
from divrl.cli import main as cli_main
from divrl.settings_help import first_sentence

HEAVY = ("torch", "transformers", "trl")

# Runs one `divrl` command line in a fresh interpreter and prints the heavy modules it imported.
PROBE = """
import contextlib, io, json, sys
from divrl.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
print(json.dumps({"code": code, "lines": len(out.getvalue().splitlines()),
                  "heavy": [name for name in HEAVY if name in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


@pytest.mark.parametrize("command", [["--help"], ["train", "--help"], ["methods"], ["train", "--list-methods"]])
def test_help_imports_neither_torch_nor_transformers_nor_trl(command: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, *command], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["code"] == 0 and seen["lines"] > 10, seen
    assert seen["heavy"] == [], f"divrl {' '.join(command)} imported {seen['heavy']}"


def test_the_shipped_index_is_what_the_registry_says_now() -> None:
    shipped = json.loads(settings_help.HELP_INDEX.read_text())
    live = json.loads(json.dumps(settings_help.registry_index()))
    assert shipped == live, "src/divrl/help_index.json is stale: write it again with python -m divrl.settings_help"


def test_a_stale_index_gives_way_to_the_live_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from divrl.methods import REGISTRY

    stale = json.loads(settings_help.HELP_INDEX.read_text())
    stale["sources"] = "0" * 64
    stale["methods"] = stale["methods"][:1]  # what an index written before the other methods existed would list
    monkeypatch.setattr(settings_help, "HELP_INDEX", tmp_path / "help_index.json")
    settings_help.HELP_INDEX.write_text(json.dumps(stale))
    assert settings_help.help_index() == json.loads(json.dumps(settings_help.registry_index()))
    settings_help.HELP_INDEX.unlink()  # no index at all (a build that left it out): the live registry too
    assert len(settings_help.help_index()["methods"]) == len(REGISTRY) > 1


def test_no_help_line_is_cut_short(capsys: pytest.CaptureFixture[str]) -> None:
    from divrl.methods import REGISTRY
    from divrl.train import TrainScriptArguments
    from divrl.trainers._fields import RunFields

    assert cli_main(["train", "x.yaml", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= settings_help.HELP_WIDTH for line in out.splitlines())
    text = " ".join(out.split())  # each wrapped sentence on one line
    configs = [TrainScriptArguments, RunFields, *(method.Config for method in REGISTRY.values())]
    for spec in (spec for config in configs for spec in dataclasses.fields(config) if spec.init):
        sentence = first_sentence(spec.metadata.get("help", ""))
        assert sentence and sentence in text, spec.name
    task_help = first_sentence(dataclasses.fields(TrainScriptArguments)[0].metadata["help"])
    assert "hypospace-voxel, ideas, molecules; or your own task" in task_help  # the task list, whole


def test_first_sentence_keeps_abbreviations_and_drops_the_default() -> None:
    assert first_sentence("A split, e.g. 'fit': less dev. Default 'train'.") == "A split, e.g. 'fit': less dev."
    assert first_sentence("Where it ends. The rest is detail.") == "Where it ends."
    assert first_sentence("Stop strings (i.e. END) end it. Default None.") == "Stop strings (i.e. END) end it."
