"""Facts about the machine a benchmark ran on, for its results file (shared by the benchmark scripts)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or the platform string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
