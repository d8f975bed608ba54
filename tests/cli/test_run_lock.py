"""The run lock (`divrl.run_lock.run_lock`) leaves no file behind, and a lock on a removed file never counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from divrl.run_lock import LOCK_FILE, RunLocked, _names_the_file, run_lock


def test_the_holder_writes_its_pid_and_removes_the_file_when_it_ends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with run_lock(str(out)):
        assert (out / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert not (out / LOCK_FILE).exists()


def test_the_file_is_removed_when_the_run_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="disk"), run_lock(str(tmp_path)):
        raise OSError("the disk is full")
    assert list(tmp_path.iterdir()) == []


def test_a_second_holder_refuses_naming_the_first_and_the_first_keeps_its_file(tmp_path: Path) -> None:
    with run_lock(str(tmp_path)):
        with pytest.raises(RunLocked, match=f"pid {os.getpid()}"), run_lock(str(tmp_path)):
            pass
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_file_left_by_a_killed_run_is_taken_and_removed(tmp_path: Path) -> None:
    (tmp_path / LOCK_FILE).write_text("12345\n")  # a SIGKILLed holder's pid; the kernel released its lock
    with run_lock(str(tmp_path)):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_on_a_file_its_holder_removed_or_replaced_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / LOCK_FILE
    with open(path, "a+") as handle:
        assert _names_the_file(str(path), handle)
        path.unlink()  # the holder ended after this process opened the file
        assert not _names_the_file(str(path), handle)
        path.write_text("")  # and the next run created the path's new file
        assert not _names_the_file(str(path), handle)
