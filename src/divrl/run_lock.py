"""One training process per output_dir: an OS-level advisory lock on `OUTPUT_DIR/.divrl.lock`, held for the run.

`fcntl.flock` is released by the kernel when its holder exits, however it exits (a SIGKILL included), so a killed run
never leaves the folder locked; the file stays, emptied when its holder ends normally, and holds the holder's pid
while it runs, for the refusal's message. Under `accelerate launch` only the processes that write checkpoints
(`should_save`: the main process, or each node's with save_on_each_node) take it, and every process learns whether
they got it, so that all of them refuse together rather than some waiting forever for the others.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

LOCK_FILE = ".divrl.lock"


class RunLocked(ValueError):
    """Another process holds the output_dir's lock."""


def _holder(handle: Any) -> str:
    """What the lock file says about its holder ('pid N'), or that it has not written it yet."""
    handle.seek(0)
    pid = handle.read().strip()
    return f"pid {pid}" if pid.isdigit() else "a process that has not written its pid yet"


@contextmanager
def run_lock(output_dir: str) -> Iterator[None]:
    """Hold `output_dir`'s lock for the block (creating the folder); RunLocked naming the holder's pid when another
    process holds it. Where the platform has no `fcntl` (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover (not POSIX)
        yield
        return
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, LOCK_FILE)
    with open(path, "a+", encoding="utf-8") as handle:  # "a+": never truncates another holder's pid
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(f"output_dir {output_dir!r} is in use by another training process ({_holder(handle)}, "
                            f"which holds {path}): wait for it to end, or choose another output_dir") from None
        try:
            handle.truncate(0)
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            handle.truncate(0)  # the pid is stale once we end: leave the file as we found it
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextmanager
def training_run_lock(training_args: Any) -> Iterator[None]:
    """`run_lock(training_args.output_dir)` in every process that writes checkpoints; all processes raise the
    same RunLocked when one of them could not take it."""
    from accelerate.utils import gather_object

    with ExitStack() as held:
        refusal = None
        if training_args.should_save:
            try:
                held.enter_context(run_lock(training_args.output_dir))
            except RunLocked as refused:
                refusal = str(refused)
        refusals = [message for message in gather_object([refusal]) if message]
        if refusals:
            raise RunLocked(refusals[0])
        yield
