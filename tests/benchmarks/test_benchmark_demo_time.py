"""benchmarks/micro/demo_time.py's bookkeeping, on a fake short command in place of the demo: two runs, the second
beside a busy process it starts and stops, their ratio and threads lines, and the table beside the documented time."""

from __future__ import annotations

import sys
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "micro"))

import demo_time as bench  # noqa: E402

# A stand-in for the demo: its progress banner and threads line, then how many busy-loop processes run beside it.
FAKE_DEMO = f"""
import psutil
print("divrl: torch threads: 1 (1-minute load average 0.5 on 2 cores; set OMP_NUM_THREADS to choose)")
print("[1/1] toy comparison  (elapsed 0 s)")
loops = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-2:] == ["-c", {bench.BUSY_LOOP!r}]]
print("busy", len(loops))
"""


def _busy_loops() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-2:] == ["-c", bench.BUSY_LOOP]]


def test_the_second_run_has_one_busy_process_beside_it_and_none_outlives_it(capsys) -> None:
    before = len(_busy_loops())
    result = bench.idle_and_busy(lambda run: [sys.executable, "-c", FAKE_DEMO])
    printed = capsys.readouterr().out.splitlines()
    assert [line for line in printed if line.startswith("busy ")] == [f"busy {before}", f"busy {before + 1}"]
    assert len(_busy_loops()) == before  # stopped and reaped
    assert result["busy_to_idle"] == result["busy_wall_s"] / result["wall_s"]
    assert result["threads"] == {run: printed[0] for run in ("idle", "busy")}
    assert result["documented_s"] == 410 and result["busy_target_ratio"] == 2.0
    assert "toy comparison" in result["phase_peak_rss_bytes"]


def test_the_table_puts_both_runs_beside_the_documented_time_and_says_whether_the_target_is_met() -> None:
    result = {"wall_s": 305.0, "busy_wall_s": 671.0, "busy_to_idle": 671.0 / 305.0, "documented_s": 305,
              "busy_target_ratio": 2.0, "threads": {"idle": "divrl: torch threads: 2 (load 0.1)", "busy": None},
              "load_average_before": {"idle": 0.1, "busy": 1.0}}
    lines = bench.timing_lines(result)
    assert "| 5 min 5 s | 1.00x of 5 min 5 s | 2 (load 0.1) | 0.1 |" in lines[2]
    assert "| 11 min 11 s | 2.20x of 5 min 5 s | not said | 1.0 |" in lines[3]
    assert lines[-1].startswith("Beside one busy process the demo took **2.20x**") and "not met" in lines[-1]
    result.update(busy_wall_s=500.0, busy_to_idle=500.0 / 305.0)
    assert bench.timing_lines(result)[-1].endswith("target: at most 2x; met).")


def test_the_reports_figures_are_dropped_whatever_their_names() -> None:
    """The demo's figures stay in its temporary folder: a link to one would break the docs site's strict build."""
    report = "## Molecules\n\n![Yield against oracle calls](molecules.png)\n\n![a new figure](eval/new.png) text"
    assert bench.IMAGE.sub("", report) == "## Molecules\n\n\n\n text"
