"""One training process per output_dir: an OS-level advisory lock on `OUTPUT_DIR/.divrl.lock`, held for the run.

`fcntl.flock` is released by the kernel when its holder exits, however it exits (a SIGKILL included), so a killed run
never leaves the folder locked. The file holds the holder's pid while it runs, for the refusal's message, and the
holder removes it when it ends normally (a killed run leaves it behind, empty of any lock, and the next run takes it).
Removing it is safe because a process that locked the file checks that the path still names the file it locked; if
the holder removed it meanwhile, it locks the path afresh. Under `accelerate launch` only the processes that write
checkpoints (`should_save`: the main process, or each node's with save_on_each_node) take it, and every process learns
whether they got it, so that all of them refuse together rather than some waiting forever for the others.

A run folder also records which command's run it holds (`RUN_RECORD`: `divrl train`'s RL or `divrl sft`'s warm start,
written once the run's checks pass, under the lock), so that neither command resumes or trains over the other's
checkpoints (`divrl.train.check_output_dir`). And `exit_with_error` ends a launched run on a one-line error alike on
every rank (under `accelerate launch`: printed once, no rank killed, the launcher's summary naming it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NoReturn

LOCK_FILE = ".divrl.lock"
RUN_RECORD = ".divrl-run.json"  # {"kind": "train" | "sft"}
# For a folder from before RUN_RECORD: a metric only one kind's trainer logs (TRL's GRPOTrainer's, its SFTTrainer's).
KIND_METRICS = {"reward": "train", "mean_token_accuracy": "sft"}


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
    while True:
        handle = open(path, "a+", encoding="utf-8")  # "a+": never truncates another holder's pid
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            handle.close()
            raise RunLocked(f"output_dir {output_dir!r} is in use by another training process ({holder}, which "
                            f"holds {path}): wait for it to end, or choose another output_dir") from None
        if _names_the_file(path, handle):
            break
        handle.close()  # its holder removed it as it ended, after we opened it: lock the path's new file
    try:
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield
    finally:
        if _names_the_file(path, handle):  # still locked: one that opened it meanwhile sees it gone, locks anew
            os.unlink(path)
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()


def _names_the_file(path: str, handle: Any) -> bool:
    """Whether `path` still names the file `handle` has open (not removed, nor replaced by another)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(handle.fileno())
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


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


def run_kind(output_dir: str) -> tuple[str, str] | None:
    """(kind, how it is known) of the run `output_dir` holds: its RUN_RECORD's, or, in a folder from before the
    record (or with an unreadable one), the kind whose KIND_METRICS its trainer states log; None when nothing tells
    (then only the checks that ignore the kind apply)."""
    from divrl.trainers.checkpoint import TRAINER_STATE_FILE

    folder = Path(output_dir)
    try:
        kind = json.loads((folder / RUN_RECORD).read_text())["kind"]
        return kind, f"recorded in {folder / RUN_RECORD}"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for state in [folder / TRAINER_STATE_FILE, *sorted(folder.glob(f"checkpoint-*/{TRAINER_STATE_FILE}"))]:
        try:
            logged = {key for entry in json.loads(state.read_text())["log_history"] for key in entry}
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for metric, kind in KIND_METRICS.items():
            if metric in logged:
                return kind, f"{state} logs {metric}"
    return None


def record_run_kind(output_dir: str, kind: str) -> None:
    """Write `kind` ('train' or 'sft') into output_dir's RUN_RECORD, atomically (each process through a temporary
    file of its own, so the ranks of a launch may all write it)."""
    path = Path(output_dir) / RUN_RECORD
    text = json.dumps({"kind": kind}) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
        return  # already says so: nothing to write (a resume on a nearly full disk needs no room for it)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{RUN_RECORD}.{os.getpid()}.partial")
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise OSError(f"cannot write {path} ({error.strerror or error}): free space or choose another "
                      "output_dir") from None


def exit_with_error(line: str) -> NoReturn:
    """End this process on `line`, a one-line error, with status 1 (as `sys.exit(line)`, which a single process
    does). Under a multi-process launch (WORLD_SIZE > 1, e.g. `accelerate launch`) every rank ends alike: RANK 0
    prints the line (not each rank); each rank leaves it in torchrun's error file, so that the launcher's failure
    summary names it rather than a link to torchrun's docs (and a rank failing alone is not silent); and each exits
    at once (`os._exit`, without the interpreter's slow teardown), so that ranks seldom outlive the first to exit
    until the agent's next check (it then logs a SIGTERM to them); one it signals meanwhile still exits with status 1,
    so the summary never reports a rank killed. The launcher still prints its own traceback: torchrun's agent raises
    ChildFailedError for any non-zero exit of a rank and `accelerate launch` re-raises it."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        sys.exit(line)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(1))
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr)
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:  # the plain-string form torchrun's ProcessFailure reads (as for a signal)
        Path(error_file).write_text(json.dumps({"message": line, "timestamp": int(time.time())}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)
