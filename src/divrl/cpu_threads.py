"""How many intra-op threads torch uses on a machine that other work shares (issue 60).

torch starts one thread per core; beside another busy process each parallel region then waits for a core that
process holds, and a run takes several times as long as with fewer threads (benchmarks/micro/thread_oversubscription.py:
3x on 2 cores). `use_free_cores` gives torch the cores the 1-minute load average leaves free, at least one, unless
the user chose with OMP_NUM_THREADS. It decides once per process (the demo's later trainings must not count the
demo's own load) and says what it chose in one line. The thread count changes float32 sums, so runs compare
exactly only at the same count; the line says which.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

USER_SETTING = "OMP_NUM_THREADS"
_chosen: int | None = None  # this process's choice, once made


def free_cores(load_average: float, cores: int, processes: int = 1) -> int:
    """Cores the load leaves free, shared among `processes` (the ranks of a launch on this machine); at least 1."""
    return max(1, (cores - round(load_average)) // max(1, processes))


def thread_choice(environ: Mapping[str, str], load_average: Callable[[], tuple[float, float, float]] | None,
                  cores: int | None) -> tuple[int | None, str]:
    """(threads for torch, the line saying why): None when the user set OMP_NUM_THREADS (torch follows it
    already) or the platform has no load average, else the free cores of `load_average()` against `cores`
    (os.cpu_count(); 1 when unknown)."""
    if environ.get(USER_SETTING, "").strip():
        return None, f"divrl: torch threads: {USER_SETTING}={environ[USER_SETTING]} (your setting)"
    if load_average is None:
        return None, f"divrl: torch threads: torch's default (no load average here; set {USER_SETTING} to choose)"
    cores = cores or 1
    load = load_average()[0]
    processes = int(environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    threads = free_cores(load, cores, processes)
    per_rank = f" per process, {processes} processes" if processes > 1 else ""
    return threads, (f"divrl: torch threads: {threads}{per_rank} (1-minute load average {load:.1f} on {cores} cores; "
                     f"set {USER_SETTING} to choose, and the same count to reproduce a run exactly)")


def use_free_cores(log: Callable[[str], None] = print) -> int:
    """Set torch's intra-op thread count from the free cores (`thread_choice`) the first time it is called in this
    process, logging the one line (under a launch, on rank 0 only); later calls keep that choice silently. Returns
    torch's thread count."""
    global _chosen
    import torch

    if _chosen is None:
        threads, line = thread_choice(os.environ, getattr(os, "getloadavg", None), os.cpu_count())
        if threads is not None:
            torch.set_num_threads(threads)
        _chosen = torch.get_num_threads()
        if os.environ.get("RANK", "0") == "0":
            log(line)
    return _chosen
