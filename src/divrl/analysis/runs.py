"""Reading the metrics a training run logged (transformers' `trainer_state.json` log history)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _checkpoint_step(path: Path) -> int:
    suffix = path.name.rsplit("-", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


def find_trainer_state(run_dir: str | Path) -> Path:
    """The run's `trainer_state.json`: the run directory's own, else its latest `checkpoint-N`'s."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} is a file: name the training output_dir that holds it")
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {str(run_dir)!r} does not exist")
    if (run_dir / "trainer_state.json").is_file():
        return run_dir / "trainer_state.json"
    checkpoints = sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: _checkpoint_step(p.parent))
    if not checkpoints:
        raise FileNotFoundError(
            f"no trainer_state.json in {str(run_dir)!r} or its checkpoint-*/ folders: is it a training output dir?"
        )
    return checkpoints[-1]


def load_log_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """The training log entries (one dict per logging step) of a run, in step order.

    A `trainer_state.json` that is not JSON, not a mapping, or whose `log_history` is missing or not a list of
    mappings is a ValueError naming the file, for `divrl plot` and `divrl fit-law` alike.
    """
    path = find_trainer_state(run_dir)
    try:
        state = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}): not a trainer_state.json transformers wrote") from None
    if not isinstance(state, dict):
        raise ValueError(f"{path} holds a JSON {type(state).__name__}, not the mapping transformers writes")
    history = state.get("log_history")
    if not isinstance(history, list):
        found = "no log_history" if history is None else f"a log_history of type {type(history).__name__}"
        raise ValueError(f"{path} has {found}; transformers writes a list of log entries there")
    bad = next((i for i, entry in enumerate(history) if not isinstance(entry, dict)), None)
    if bad is not None:
        raise ValueError(f"{path}: log_history entry {bad} is a {type(history[bad]).__name__}, not a mapping")
    return [entry for entry in history if "step" in entry]


def metric_series(history: list[dict[str, Any]], *keys: str) -> list[tuple[float, ...]]:
    """(step, value of each key) for every log entry that has all `keys` as finite numbers."""
    rows = []
    for entry in history:
        values = [entry.get(key) for key in keys]
        if all(isinstance(v, (int, float)) and v == v and abs(v) != float("inf") for v in values):
            rows.append((float(entry["step"]), *map(float, values)))
    return rows
