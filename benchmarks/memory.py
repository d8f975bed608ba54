"""Peak resident memory of a process tree, sampled while it runs (shared by the benchmark scripts).

`TreeRSSMonitor` sums the RSS of a process and all its descendants every `interval` seconds in a background
thread and keeps the peak, overall and per named phase (the caller names phases as it sees them, e.g. from the
progress lines of the process). Sampling can miss a spike shorter than the interval, so callers also read the
kernel's exact per-process high-water mark after the process ends (`children_max_rss_bytes`).
"""

from __future__ import annotations

import resource
import sys
import threading
import time

import psutil


def tree_rss_bytes(pid: int) -> int:
    """Summed RSS of process `pid` and all its descendants (0 once it is gone). Pages shared between processes
    count once per process, so this is an upper bound for a tree that forks."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def children_max_rss_bytes() -> int:
    """The largest peak RSS of any terminated, waited-for child (the kernel's high-water mark, `ru_maxrss`)."""
    maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return maxrss if sys.platform == "darwin" else maxrss * 1024  # bytes on macOS, KiB on Linux


class TreeRSSMonitor:
    """Samples `tree_rss_bytes(pid)` every `interval` s from `start()` until `stop()`; `peak` and `phase_peaks`."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.phase = "start"
        self.phase_peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TreeRSSMonitor:
        self._thread.start()
        return self

    def set_phase(self, name: str) -> None:
        """Attribute later samples to phase `name` (phases keep their first-seen order)."""
        self._sample()
        self.phase = name
        self.phase_peaks.setdefault(name, 0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        rss = tree_rss_bytes(self.pid)
        self.peak = max(self.peak, rss)
        self.phase_peaks[self.phase] = max(self.phase_peaks.get(self.phase, 0), rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)
