"""Does torch's intra-op thread count oversubscribe the cores when other processes run? (issue 45, item 7)

A fixed small workload (forward and backward of a two-layer MLP of a small transformer block's shape, a batch of 64
rows) is timed with 1 and with 2 torch threads, first beside whatever else the machine runs, then beside one more
busy-loop process that this script starts and stops itself (a controlled competitor: one core's worth of load).
The four conditions are interleaved round by round, so slow drifts of the other load hit all of them alike; the
table gives medians over rounds and the median per-round ratio of 2 threads to 1. Bounded: about a minute on 2
cores. Writes benchmarks/results/thread_oversubscription.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
BUSY_LOOP = "while True: pass"


def workload(iterations: int) -> float:
    """Seconds for `iterations` forward+backward passes of a 768 -> 3072 -> 768 MLP on 64 rows (fixed seed)."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(torch.nn.Linear(768, 3072), torch.nn.GELU(), torch.nn.Linear(3072, 768))
    x = torch.randn(64, 768)
    began = time.perf_counter()
    for _ in range(iterations):
        layers(x).square().mean().backward()
    return time.perf_counter() - began


def timed(threads: int, iterations: int) -> float:
    """`workload` run with `threads` intra-op threads."""
    torch.set_num_threads(threads)
    return workload(iterations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    load_before = os.getloadavg()
    timed(1, 2)  # warm-up: allocator and kernels
    times: dict[str, list[float]] = {key: [] for key in ("1 alone", "2 alone", "1 busy", "2 busy")}
    for _ in range(args.rounds):
        for threads in (1, 2):
            times[f"{threads} alone"].append(timed(threads, args.iterations))
        competitor = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
        try:
            time.sleep(0.5)  # let it get scheduled
            for threads in (1, 2):
                times[f"{threads} busy"].append(timed(threads, args.iterations))
        finally:
            competitor.kill()
            competitor.wait()
    load_after = os.getloadavg()
    median = {key: statistics.median(values) for key, values in times.items()}
    ratio = {cond: statistics.median(t2 / t1 for t1, t2 in zip(times[f"1 {cond}"], times[f"2 {cond}"], strict=True))
             for cond in ("alone", "busy")}
    result = {
        "workload": f"{args.iterations} x forward+backward, MLP 768-3072-768, batch 64, float32",
        "rounds": args.rounds, "seconds": times, "median_s": median, "ratio_2_to_1_threads": ratio,
        "cores": os.cpu_count(), "torch_default_threads": default_threads,
        "load_average_1min_before_after": [load_before[0], load_after[0]],
        "cpu": cpu_model(), "torch": torch.__version__, "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    lines = [
        "## Torch threads beside other load (issue 45, `benchmarks/micro/thread_oversubscription.py`)", "",
        f"{result['workload']}; median of {args.rounds} interleaved rounds on {result['cpu']} ({os.cpu_count()} "
        f"cores; torch's default here: {default_threads} threads), {result['date']}. 1-minute load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (other jobs on the machine kept running).", "",
        "| beside | 1 thread, s | 2 threads, s | 2 threads / 1 thread (median per round) |", "|---|---|---|---|",
        f"| the machine's other jobs | {median['1 alone']:.2f} | {median['2 alone']:.2f} | {ratio['alone']:.2f} |",
        f"| + one busy-loop process | {median['1 busy']:.2f} | {median['2 busy']:.2f} | {ratio['busy']:.2f} |", "",
        "A ratio above 1 means the second thread costs time: it waits for a core another process holds, and the "
        "first thread waits for it at every parallel region.",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "thread_oversubscription.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "thread_oversubscription.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
