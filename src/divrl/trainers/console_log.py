"""`console_log: compact`: one short line per logged training step on the console, every metric in a JSONL file.

TRL prints the whole metric dict (dozens of keys) at every logging step, which buries what a reader wants to
follow. In compact mode transformers' printing callbacks are replaced by this one: it prints step, validity
(the unshaped primary reward), distinct valid answers per group (the mean over the step's groups), entropy and the
seconds since the last line, and appends each log entry, complete, to `<output_dir>/metrics.jsonl` as it arrives (so
a killed run keeps its logs). The first and the last step are always logged, and every step of a run no longer than
`logging_steps`, so a short run is never silent until its summary line.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback, ProgressCallback

# Console column -> the log key it shows (the first key a log entry has).
COLUMNS: dict[str, tuple[str, ...]] = {
    "validity": ("divrl/primary_reward", "reward"),
    "distinct valid/group": ("diversity/distinct_valid",),  # a mean over the step's groups
    "entropy": ("entropy",),
}
METRICS_FILE = "metrics.jsonl"


def _number(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def compact_line(logs: dict[str, Any], step: int, max_steps: int, seconds: float) -> str:
    """The console line of one training log entry: step, the COLUMNS it has ('-' for those it lacks), seconds."""
    cells = [f"step {step}/{max_steps}"]
    for label, keys in COLUMNS.items():
        key = next((k for k in keys if k in logs), None)
        cells.append(f"{label} {_number(logs[key]) if key else '-'}")
    cells.append(f"{seconds:.1f} s")
    return "  ".join(cells)


class CompactConsoleCallback(TrainerCallback):
    """Prints `compact_line` for training logs and one summary line for other logs; writes every log to JSONL."""

    def __init__(self) -> None:
        self._last = time.perf_counter()

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._last = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Log the first and the last step, and every step when the run is no longer than `logging_steps`."""
        if getattr(args.logging_strategy, "value", args.logging_strategy) == "no":
            return
        short = state.max_steps <= (state.logging_steps or args.logging_steps)
        if short or state.global_step in (1, state.max_steps):
            control.should_log = True

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not logs or not state.is_world_process_zero:
            return
        with (Path(args.output_dir) / METRICS_FILE).open("a") as file:
            file.write(json.dumps({"step": state.global_step, **logs}, default=str) + "\n")
        now = time.perf_counter()
        if "train_runtime" in logs:
            print(f"done: {state.global_step} steps in {logs['train_runtime']:.0f} s "
                  f"(all metrics: {Path(args.output_dir) / METRICS_FILE})", flush=True)
        elif "loss" in logs or any(k in logs for keys in COLUMNS.values() for k in keys):
            print(compact_line(logs, state.global_step, state.max_steps, now - self._last), flush=True)
            self._last = now
        else:  # an evaluation's log: its numbers in one line
            print(f"step {state.global_step} eval: " + "  ".join(
                f"{key.rsplit('/', 1)[-1]} {_number(value)}" for key, value in logs.items()
                if isinstance(value, (int, float))), flush=True)


def use_compact_console(trainer: Any) -> None:
    """Replace transformers' printing callbacks on `trainer` with a CompactConsoleCallback."""
    for callback in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(callback)
    trainer.add_callback(CompactConsoleCallback())
