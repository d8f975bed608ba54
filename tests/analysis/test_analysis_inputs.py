"""`divrl fit-law` and `divrl plot` refuse malformed trainer_state.json alike, naming the file (issue 14 item 10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divrl.analysis.runs import load_log_history
from divrl.cli import main


@pytest.mark.parametrize(
    "content, problem",
    [
        (json.dumps({"log_history": {"step": 1}}), "log_history of type dict"),
        (json.dumps({"log_history": "none"}), "log_history of type str"),
        (json.dumps({"global_step": 3}), "has no log_history"),
        (json.dumps({"log_history": [{"step": 1}, 7]}), "log_history entry 1 is a int"),
        (json.dumps([1, 2]), "holds a JSON list"),
        ('{"log_history": [', "is not valid JSON"),
    ],
)
def test_malformed_trainer_state_is_refused_by_both_commands(
    content: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    state = run / "trainer_state.json"
    state.write_text(content)
    with pytest.raises(ValueError, match=problem):
        load_log_history(run)
    for argv in (["fit-law", str(run), "--out", str(tmp_path / "law")],
                 ["plot", str(run), "--out", str(tmp_path / "p.png")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert str(state) in err and problem in err and "Traceback" not in err
