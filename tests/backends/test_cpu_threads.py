"""torch's thread count from the free cores (`divrl.cpu_threads`), with a faked load average."""

from __future__ import annotations

import pytest

from divrl import cpu_threads
from divrl.cpu_threads import free_cores, thread_choice


@pytest.mark.parametrize(("load", "cores", "processes", "expected"), [
    (0.0, 2, 1, 2), (0.9, 2, 1, 1), (1.4, 2, 1, 1), (2.0, 2, 1, 1), (5.3, 2, 1, 1), (1.0, 16, 1, 15),
    (0.2, 16, 2, 8), (15.0, 16, 4, 1)])
def test_free_cores_leave_the_loaded_ones_and_keep_one(load: float, cores: int, processes: int,
                                                       expected: int) -> None:
    assert free_cores(load, cores, processes) == expected


def test_the_load_decides_without_the_users_setting() -> None:
    threads, line = thread_choice({}, lambda: (1.1, 3.0, 4.0), 2)
    assert threads == 1
    assert "\n" not in line and "torch threads: 1 " in line and "load average 1.1 on 2 cores" in line
    assert "OMP_NUM_THREADS" in line


def test_the_users_omp_num_threads_wins_over_the_load() -> None:
    threads, line = thread_choice({"OMP_NUM_THREADS": "3"}, lambda: (9.0, 9.0, 9.0), 2)
    assert threads is None and "OMP_NUM_THREADS=3 (your setting)" in line


def test_ranks_of_a_launch_share_the_free_cores() -> None:
    threads, line = thread_choice({"LOCAL_WORLD_SIZE": "2"}, lambda: (0.0, 0.0, 0.0), 8)
    assert threads == 4 and "per process, 2 processes" in line


def test_no_load_average_keeps_torchs_default() -> None:
    threads, line = thread_choice({}, None, 4)
    assert threads is None and "torch's default" in line


def test_the_choice_is_made_once_per_process_and_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.setattr(cpu_threads, "_chosen", None)
    monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: 2)
    loads = iter([(1.6, 0.0, 0.0), (0.0, 0.0, 0.0)])  # the second call would choose 2: it must not ask
    monkeypatch.setattr(cpu_threads.os, "getloadavg", lambda: next(loads))
    before = torch.get_num_threads()
    lines: list[str] = []
    try:
        assert cpu_threads.use_free_cores(lines.append) == 1
        assert torch.get_num_threads() == 1
        assert cpu_threads.use_free_cores(lines.append) == 1
    finally:
        torch.set_num_threads(before)
    assert len(lines) == 1 and "torch threads: 1 " in lines[0]
