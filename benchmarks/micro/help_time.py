"""Seconds the `divrl` help commands take, each a fresh process as a user starts it (issue 60: target under 2 s).

Times `divrl --help`, `divrl train --help`, `divrl methods` and `divrl recipes` through the installed console script,
REPEATS times each in turn (the commands interleave, so load drifts hit all alike), and reports the median and range
of the wall seconds. For scale, one more row builds `divrl methods`' text from the live method registry (importing
torch), which is what the help falls back to when its shipped index is stale. Writes benchmarks/results/help_time.json
and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
TARGET_SECONDS = 2.0  # issue 60's target for help on the 2-core machine
LIVE_REGISTRY = "from divrl.settings_help import methods_text, registry_index; methods_text(True, registry_index())"


def commands() -> dict[str, list[str]]:
    """What is timed: the label the results show -> the command line run."""
    divrl = Path(sys.executable).with_name("divrl")
    script = [str(divrl)] if divrl.is_file() else [sys.executable, "-m", "divrl.cli"]
    return {"divrl --help": [*script, "--help"], "divrl train --help": [*script, "train", "--help"],
            "divrl methods": [*script, "methods"], "divrl recipes": [*script, "recipes"],
            "live registry (stale index)": [sys.executable, "-c", LIVE_REGISTRY]}


def seconds(command: list[str]) -> float:
    """Wall seconds of one run of `command`, which must exit 0."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    """The `## ` fragment for BENCHMARKS.md."""
    machine = result["machine"]
    rows = "\n".join(f"| `{label}` | {statistics.median(times):.2f} | {min(times):.2f} - {max(times):.2f} |"
                     for label, times in result["seconds"].items())
    help_rows = {label: times for label, times in result["seconds"].items() if label.startswith("divrl")}
    slowest = max(help_rows, key=lambda label: statistics.median(help_rows[label]))
    worst = statistics.median(help_rows[slowest])
    verdict = "under" if worst < TARGET_SECONDS else "over"
    path.write_text(f"""## Help commands' time (`benchmarks/micro/help_time.py`)

Each command a fresh process through the installed `divrl` script, {result["repeats"]} runs each, interleaved; wall
seconds. The help reads the method registry's shipped index (`src/divrl/help_index.json`) and imports neither torch,
transformers nor TRL; the last row builds `divrl methods`' text from the live registry instead (what a stale index
falls back to), for scale.

| command | median seconds | range |
|---|---|---|
{rows}

Slowest help command: `{slowest}`, median {worst:.2f} s, {verdict} the {TARGET_SECONDS:.0f} s target.

Machine: {machine["nproc"]} cores ({machine["cpu"]}), Python {machine["python"]}; {result["date"]}; 1-minute load
average {machine["load_before"]:.1f} before, {machine["load_after"]:.1f} after.
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {args.repeats}")

    timed = commands()
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {label: [] for label in timed}
    for repeat in range(args.repeats):
        for label, command in timed.items():
            times[label].append(seconds(command))
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{label} {times[label][-1]:.2f} s"
                                                                  for label in timed), flush=True)
    result = {
        "repeats": args.repeats,
        "seconds": times,
        "machine": {"nproc": os.cpu_count(), "cpu": cpu_model(), "python": sys.version.split()[0],
                    "load_before": load_before, "load_after": os.getloadavg()[0]},
        "date": datetime.date.today().isoformat(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "help_time.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(out / "help_time.md", result)
    print((out / "help_time.md").read_text())


if __name__ == "__main__":
    main()
