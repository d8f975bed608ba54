"""Crash-safe method state in Trainer checkpoints, and resuming from the latest COMPLETE checkpoint.

transformers' `Trainer._save_checkpoint` (5.x) writes the model, optimizer, scheduler, RNG states and, last,
`trainer_state.json` into `checkpoint-N`, and only then rotates older checkpoints away (`save_total_limit`).
divrl's trainers write their one state file (`divrl_state.pt`: the methods', the population's, the objective's
(FlowRL's log Z head) and every process's task state) into `checkpoint-N` BEFORE calling it, atomically (a temporary
file renamed into place), so:
- a checkpoint with a readable `trainer_state.json` holds the state file of the run that wrote it;
- a process killed anywhere inside a save leaves the previous checkpoints untouched (rotation comes last) and
  at most an incomplete `checkpoint-N` (no or a truncated `trainer_state.json`, or a method state file missing),
  which `resume_from_checkpoint=True` skips with a one-line warning naming it (`last_complete_checkpoint`).
After the save divrl writes `divrl_manifest.json` (every file's size and sha256), last, in a background thread
(`BackgroundManifest`: hashing reads the files back, which a large checkpoint makes slow, so the next training step
does not wait for it): a checkpoint whose files no longer match it (a truncated adapter or optimizer, e.g. a disk that
filled up, a copy cut short; bytes garbled in place; a JSON file only when it no longer parses, since people edit
trainer states) is skipped the same way, and so is one whose manifest does not parse or has the wrong shape.
A checkpoint without a manifest (older runs, or a kill between the save and the manifest) is checked by reading
what can be read cheaply: JSON files parse, safetensors headers fit their files, torch files' zip directories open.
When no checkpoint of a run can be resumed, `interrupted_first_save` tells a kill inside the run's first save (one
checkpoint, never completed: training starts again) from damage to a run's saved checkpoints (refused, untouched).
`CheckpointPolicy` applies all of this for a `DivRLTrainer` (its `checkpoints`; the trainer's TRL hooks delegate to it),
and `save_final` writes a run's final save the same all-or-nothing way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import struct
import threading
import zipfile
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from divrl.trainers.fsdp import saves_no_weights

if TYPE_CHECKING:
    from divrl.methods import Method

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME: the last file of a checkpoint
MANIFEST_FILE = "divrl_manifest.json"  # written after everything else: each file's size and sha256
STATE_FILE = "divrl_state.pt"  # all of divrl's state in a checkpoint
# Before issue 30 the population's and FlowRL's state had files of their own; such checkpoints still resume.
LEGACY_STATE_FILES = {"population": "population_state.pt", "objective": "flowrl_log_z.pt"}
_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")  # transformers' PREFIX_CHECKPOINT_DIR pattern


def checkpoint_dir(trainer: Any, trial: Any) -> str:
    """The folder `Trainer._save_checkpoint` is about to write for the current step (created if missing)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    folder = os.path.join(trainer._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")
    os.makedirs(folder, exist_ok=True)
    return folder


def atomic_save(obj: Any, path: str) -> None:
    """`torch.save(obj, path)` that never leaves a partial file at `path`: written to a temporary file in the same
    folder, flushed to disk, then renamed over `path` (an interrupted save leaves only `path.tmp`)."""
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as handle:
        torch.save(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _files(checkpoint: str) -> dict[str, int]:
    """Every file under `checkpoint` (relative path -> size), the manifest and temporary files left out."""
    sizes = {}
    for folder, _, names in os.walk(checkpoint):
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, checkpoint)
            if relative != MANIFEST_FILE and not name.endswith(".tmp"):
                sizes[relative] = os.path.getsize(path)
    return sizes


def file_sha256(path: str) -> str:
    """The sha256 of the file's bytes, as hex (read in 4 MiB blocks: hashlib releases the GIL on each)."""
    digest, block = hashlib.sha256(), bytearray(4 << 20)
    view = memoryview(block)
    with open(path, "rb", buffering=0) as handle:
        while read := handle.readinto(block):
            digest.update(view[:read])
    return digest.hexdigest()


def write_manifest(checkpoint: str) -> None:
    """Record every file's size and sha256 in `checkpoint`, atomically; call it when the checkpoint is complete. A
    write that fails is one CheckpointSaveError line (the checkpoint stays: without a manifest it is still checked
    and resumed from)."""
    import shutil

    files = {name: {"size": size, "sha256": file_sha256(os.path.join(checkpoint, name))}
             for name, size in _files(checkpoint).items()}
    temporary = os.path.join(checkpoint, f"{MANIFEST_FILE}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump({"files": files}, handle, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, os.path.join(checkpoint, MANIFEST_FILE))
    except OSError as error:
        free = shutil.disk_usage(checkpoint).free
        raise CheckpointSaveError(
            f"writing {MANIFEST_FILE} into {checkpoint} failed: {_write_failure_cause(error, free, 1 << 16)} "
            f"({free / 2**20:.1f} MiB free); the checkpoint itself was saved and a resume checks its files without "
            "the manifest: free space, then resume with --resume_from_checkpoint true") from error
    finally:
        if os.path.exists(temporary):  # a full disk: leave no stray file behind
            os.remove(temporary)


class BackgroundManifest:
    """Runs one checkpoint's `write_manifest` at a time in a thread, off the training step's critical path; `wait`
    joins it (before the next save, and when training ends) and re-raises what it raised."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self, write: Callable[[], None]) -> None:
        """Wait for the previous manifest, then run `write` in a thread."""
        self.wait()

        def run() -> None:
            try:
                write()
            except BaseException as error:  # noqa: BLE001 (handed to the training thread by `wait`)
                self._error = error

        self._thread = threading.Thread(target=run, name="divrl-manifest")
        self._thread.start()

    def wait(self) -> None:
        """Block until the running manifest is written; raise its error, if any, once."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error


def _recorded_files(checkpoint: str) -> dict[str, dict[str, Any]] | str | None:
    """The manifest's {file: {"size", "sha256"?}} (a size alone in manifests written before hashes), None when
    there is no manifest, or why it cannot be used (it does not parse, or has the wrong shape)."""
    try:
        with open(os.path.join(checkpoint, MANIFEST_FILE), encoding="utf-8") as handle:
            recorded = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return f"unreadable {MANIFEST_FILE}"
    files = recorded.get("files") if isinstance(recorded, dict) else None
    if not isinstance(files, dict):
        return f"{MANIFEST_FILE} has the wrong shape (no mapping of files)"
    entries = {}
    for name, entry in files.items():
        entry = {"size": entry} if isinstance(entry, int) else entry
        if not (isinstance(entry, dict) and isinstance(entry.get("size"), int)
                and isinstance(entry.get("sha256", ""), str)):
            return f"{MANIFEST_FILE} has the wrong shape (entry {name!r})"
        entries[name] = entry
    return entries


def _unreadable(path: str) -> str | None:
    """Why a checkpoint file cannot be read, checked cheaply by its kind (None: it reads, or its kind is unknown)."""
    name = os.path.basename(path)
    try:
        if name.endswith(".json"):
            with open(path, encoding="utf-8") as handle:
                json.load(handle)
        elif name.endswith(".safetensors"):
            with open(path, "rb") as handle:
                (header_size,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(header_size))
            ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
            if 8 + header_size + max(ends, default=0) > os.path.getsize(path):
                return "truncated"
        elif name.endswith((".pt", ".pth", ".bin")):
            with open(path, "rb") as handle:
                zipped = handle.read(2) == b"PK"  # torch.save's format since torch 1.6; older pickles go unchecked
            if zipped:
                with zipfile.ZipFile(path):  # the zip's directory sits at the end of the file: a cut loses it
                    pass
            elif os.path.getsize(path) == 0:
                return "empty"
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error, zipfile.BadZipFile):
        return "unreadable"
    return None


def damaged_weight_files(folder: str) -> list[str]:
    """'NAME truncated' / 'NAME unreadable' for each weight file (safetensors, torch) in `folder` that cannot be
    read whole, checked cheaply (headers and zip directories, not the tensors)."""
    names = sorted(name for name in os.listdir(folder) if name.endswith((".safetensors", ".bin", ".pt")))
    return [f"{name} {why}" for name in names if (why := _unreadable(os.path.join(folder, name)))]


# The model files a Trainer checkpoint holds (a PEFT adapter or full weights, one file or sharded): one must be there.
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin", "model.safetensors", "model.safetensors.index.json",
                "pytorch_model.bin", "pytorch_model.bin.index.json")
OPTIMIZER_FILE = "optimizer.pt"  # transformers' OPTIMIZER_NAME


def _missing(checkpoint: str, required: str | Sequence[str]) -> str | None:
    """The required file (or 'one of A, B' for a tuple of alternatives) that `checkpoint` lacks, or None."""
    names = (required,) if isinstance(required, str) else tuple(required)
    if any(os.path.isfile(os.path.join(checkpoint, name)) for name in names):
        return None
    return names[0] if len(names) == 1 else f"model weights ({' or '.join(names[:3])}, ...)"


def incomplete_reason(checkpoint: str, required_files: Sequence[str | Sequence[str]] = ()) -> str | None:
    """Why `checkpoint` cannot be resumed from (its save was interrupted or a file was cut short since), or None
    when it is complete."""
    state = os.path.join(checkpoint, TRAINER_STATE_FILE)
    if not os.path.isfile(state):
        return f"no {TRAINER_STATE_FILE}"
    try:
        with open(state, encoding="utf-8") as handle:
            json.load(handle)
    except (OSError, ValueError):
        return f"unreadable {TRAINER_STATE_FILE}"
    missing = [name for required in required_files if (name := _missing(checkpoint, required))]
    if missing:
        return f"no {', '.join(missing)}"
    sizes = _files(checkpoint)
    recorded = _recorded_files(checkpoint)
    if isinstance(recorded, str):
        return recorded
    if recorded is not None:
        changed = [why for name, entry in sorted(recorded.items()) if (why := _differs(checkpoint, name, entry, sizes))]
        return f"{', '.join(changed)} differ from {MANIFEST_FILE}" if changed else None
    unreadable = [f"{name} {why}" for name in sorted(sizes) if (why := _unreadable(os.path.join(checkpoint, name)))]
    return ", ".join(unreadable) or None


def _differs(checkpoint: str, name: str, entry: dict[str, Any], sizes: dict[str, int]) -> str | None:
    """How file `name` differs from its manifest `entry` (size, then sha256), or None. A JSON file may be edited by
    hand: it counts as damaged only when it does not parse."""
    if name.endswith(".json") and name in sizes:
        return None if _unreadable(os.path.join(checkpoint, name)) is None else f"{name} (does not parse)"
    if sizes.get(name) != entry["size"]:
        return f"{name} ({sizes.get(name, 0)} of {entry['size']} bytes)"
    if "sha256" in entry and file_sha256(os.path.join(checkpoint, name)) != entry["sha256"]:
        return f"{name} (same size, other bytes: its sha256 changed)"
    return None


def checkpoint_folders(output_dir: str) -> list[str]:
    """The `checkpoint-N` folders in `output_dir`, highest step first (none when it is not a folder)."""
    if not os.path.isdir(output_dir):
        return []
    steps = sorted(((int(m.group(1)), name) for name in os.listdir(output_dir)
                    if (m := _CHECKPOINT_DIR.match(name)) and os.path.isdir(os.path.join(output_dir, name))),
                   reverse=True)
    return [os.path.join(output_dir, name) for _, name in steps]


def scan_checkpoints(output_dir: str, required_files: Sequence[str | Sequence[str]] = ()
                     ) -> tuple[str | None, list[tuple[str, str]]]:
    """The highest-step complete `checkpoint-N` in `output_dir` (None if there is none) and (folder, reason) for each
    newer one that is not, each also warned about in one line naming it."""
    skipped = []
    for path in checkpoint_folders(output_dir):
        reason = incomplete_reason(path, required_files)
        if reason is None:
            return path, skipped
        skipped.append((path, reason))
        logger.warning("resume_from_checkpoint=True: skipping incomplete checkpoint %s (%s: its save was "
                       "interrupted or a file was damaged since)", path, reason)
    return None, skipped


def last_complete_checkpoint(output_dir: str, required_files: Sequence[str | Sequence[str]] = ()) -> str | None:
    """The highest-step complete `checkpoint-N` in `output_dir` (None if there is none); every newer incomplete
    one is skipped with a one-line warning naming it."""
    return scan_checkpoints(output_dir, required_files)[0]


def interrupted_first_save(skipped: Sequence[tuple[str, str]]) -> bool:
    """Whether unresumable checkpoints are what a kill inside a run's first save leaves: a single checkpoint without
    a manifest (written last, so its save never finished). Any other set held a finished save, now damaged."""
    return len(skipped) == 1 and not os.path.exists(os.path.join(skipped[0][0], MANIFEST_FILE))


class CheckpointSaveError(OSError):
    """A checkpoint could not be written (a full disk, a write refused): one line saying which, the free space, and
    which earlier checkpoint a resume will use."""


# What torch's writers (the zip writer, or its C++ stream when saving into a Python file: the errno lost) and the
# Rust writers of safetensors and tokenizers (their own exception types, the OS error in the message) say when a
# write fails.
_WRITE_FAILURES = ("inline_container", "PytorchStreamWriter", "iostream error", "IoError", "I/O error", "(os error",
                   "No space left", "File too large")


def is_write_failure(error: BaseException) -> bool:
    """Whether `error`, raised while saving, is the file system refusing a write rather than a bug."""
    return isinstance(error, OSError) or any(text in str(error) for text in _WRITE_FAILURES)


def _folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(top, name)) for top, _, names in os.walk(folder) for name in names)


def _write_failure_cause(error: BaseException, free: int, needed: int) -> str:
    """'the disk is full', or what the failed write said, in one line."""
    import errno

    full = getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or free < needed or "os error 28" in str(error)
    return "the disk is full" if full else f"a write failed ({' '.join(str(error).split())[:200]})"


def save_failure(checkpoint: str, error: BaseException,
                 required_files: Sequence[str | Sequence[str]] = ()) -> CheckpointSaveError:
    """The one-line error for a save of `checkpoint` that a write failure cut short, after removing the partial
    folder (so that no resume picks it) and checking which earlier checkpoint is intact."""
    import shutil

    output_dir = os.path.dirname(checkpoint)
    free = shutil.disk_usage(output_dir).free  # before the partial folder goes: what the save ran out of
    written = _folder_bytes(checkpoint) if os.path.isdir(checkpoint) else 0
    shutil.rmtree(checkpoint, ignore_errors=True)
    previous = last_complete_checkpoint(output_dir, required_files)
    needed = max(written, _folder_bytes(previous) if previous else 0)
    kept = (f"{os.path.basename(previous)} is intact: free space, then resume with --resume_from_checkpoint true"
            if previous else "no earlier checkpoint exists")
    return CheckpointSaveError(
        f"saving {checkpoint} failed: {_write_failure_cause(error, free, needed)} ({free / 2**20:.1f} MiB free in "
        f"{output_dir!r}, a checkpoint of this run takes about {needed / 2**20:.1f} MiB); the partial "
        f"{os.path.basename(checkpoint)} was removed and {kept}")


class RunFinished(ValueError):
    """Resuming would train past the run's end: its checkpoint (`checkpoint`) is already at max_steps."""

    def __init__(self, message: str, checkpoint: str) -> None:
        super().__init__(message)
        self.checkpoint = checkpoint


class CheckpointPolicy:
    """A `DivRLTrainer`'s checkpoint and resume policy (`trainer.checkpoints`), kept out of its TRL hooks: what a
    checkpoint must hold, writing `divrl_state.pt` before transformers' save and the manifest after it, which
    checkpoint a resume starts from, and restoring divrl's state from it (refusing one that does not fit the run)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.manifest = BackgroundManifest()  # the newest checkpoint's manifest, hashed while training goes on

    # ------------------------------------------------------------------ what a checkpoint of this run holds
    def stateful_methods(self) -> dict[str, Method]:
        """The enabled methods keeping state in a checkpoint, by name."""
        trainer = self.trainer
        methods = [*trainer.diversity_state.methods.values(), *trainer.shared_methods.values()]
        return {method.name: method for method in methods if method.has_state()}

    def keeps_method_state(self) -> bool:
        """Whether an enabled method (or the task) has state that a checkpoint's divrl_state.pt must restore
        (`Method.has_state`: archives, novelty memory, entropy coefficient, outcome counts, semantic classes,
        rehearsal cursor) or the task does. IPS, unlikeliness, pass@k, length bins and the divergences on policy
        samples keep none, so such a run may resume from a plain GRPOTrainer checkpoint."""
        task = self.trainer.task
        return bool(self.stateful_methods()) or (task is not None and hasattr(task, "load_state_dict"))

    def needs_state_file(self) -> bool:
        """Whether a checkpoint of this run must hold `divrl_state.pt` to be resumed from: method or task state
        (`keeps_method_state`), a population or FlowRL's log Z head."""
        trainer = self.trainer
        return self.keeps_method_state() or trainer.population is not None or trainer.objective is not None

    def required_files(self) -> list[str | tuple[str, ...]]:
        """The files a checkpoint of this run must hold to be resumed from (a tuple: one of them): divrl's state file
        when the run keeps state, the model's weights and the optimizer where transformers writes them as files
        (not under FSDP's sharded state dicts or DeepSpeed, nor with save_only_model)."""
        trainer = self.trainer
        required: list[str | tuple[str, ...]] = [STATE_FILE] if self.needs_state_file() else []
        if not (saves_no_weights(trainer) or trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled):
            required.append(WEIGHT_FILES)
            if not trainer.args.save_only_model:
                required.append(OPTIMIZER_FILE)
        return required

    def state(self, task_states: list[dict[str, Any]] | None) -> dict[str, Any]:
        """Everything divrl adds to a checkpoint, its one file `divrl_state.pt`: the methods' state
        (`trainer.method_state_dict`), the population's (bookkeeping and each member's method state), FlowRL's log Z
        head and every process's task state; None for what this run does not have."""
        trainer = self.trainer
        return {**trainer.method_state_dict(),
                "methods": sorted(self.stateful_methods()),
                "population": None if trainer.population is None else trainer.population.state_dict(),
                "objective": None if trainer.objective is None else trainer.objective.state_dict(),
                "task": task_states}

    def _task_states(self) -> list[dict[str, Any]] | None:
        """Every process's task state (e.g. a molecule task's reward cache and diversity filter), in rank order;
        None when the task keeps none. Tasks score completions locally, so each process has its own."""
        task = self.trainer.task
        if task is None or not hasattr(task, "state_dict"):
            return None
        from accelerate.utils import gather_object

        return gather_object([task.state_dict()])

    # --------------------------------------------------------------------------------------------- saving
    def save(self, trial: Any, save_checkpoint: Callable[[], None]) -> None:
        """One checkpoint: divrl's state goes in BEFORE `save_checkpoint` (transformers' `_save_checkpoint`) writes
        trainer_state.json and rotates older checkpoints away, so a kill inside the save never leaves the newest
        checkpoint without it; a write failure removes the partial folder (one CheckpointSaveError line); the
        manifest is hashed last, in the background."""
        trainer = self.trainer
        self.manifest.wait()  # the previous checkpoint's manifest is written before this save (and rotation) starts
        task_states = self._task_states()  # a collective: every process takes part
        folder = checkpoint_dir(trainer, trial) if trainer.args.should_save else None
        try:
            if folder is not None:
                atomic_save(self.state(task_states), os.path.join(folder, STATE_FILE))
            save_checkpoint()  # rotation comes last: a failure before it keeps the older ones
        except Exception as error:  # safetensors and tokenizers raise their own types for a failed write
            if folder is None or not is_write_failure(error):
                raise
            raise save_failure(folder, error, self.required_files()) from error
        trainer.accelerator.wait_for_everyone()  # every rank's files (its RNG state) are written before listing
        if folder is not None:  # last: a checkpoint whose files later differ from it is not resumed from
            self.manifest.start(lambda: write_manifest(folder))

    def wait(self) -> None:
        """Block until the last checkpoint's manifest is on disk (raising what its write raised)."""
        self.manifest.wait()

    # ------------------------------------------------------------------------------------------- resuming
    def resume_target(self, resume_from_checkpoint: str | bool | None) -> str | None:
        """The checkpoint `train` resumes from. True: the newest complete one, skipping (with a one-line warning)
        any whose save was interrupted or whose files were damaged since; when none is complete, training starts
        from scratch with a warning if that is what a kill inside the run's first save leaves, and is refused
        otherwise (every saved checkpoint damaged: nothing is touched). A path must be complete.
        Raises `RunFinished` for a checkpoint already at max_steps: resuming it would train past the run's end."""
        if resume_from_checkpoint is None or resume_from_checkpoint is False:
            return None
        args = self.trainer.args
        output_dir = args.output_dir
        if resume_from_checkpoint is True:
            checkpoint, skipped = scan_checkpoints(output_dir, self.required_files())
            if checkpoint is None:
                journal = self._task_journal()
                if not skipped and journal is not None:
                    logger.warning("resume_from_checkpoint=True: %s holds no checkpoint, only %s (the run was killed "
                                   "before its first save): training from scratch, reusing what it paid for",
                                   output_dir, journal)
                    return None
                if not skipped:
                    raise ValueError(f"resume_from_checkpoint=True: no checkpoint in {output_dir!r} to resume from")
                if not interrupted_first_save(skipped):
                    damaged = "; ".join(f"{os.path.basename(path)}: {reason}" for path, reason in skipped)
                    raise ValueError(f"resume_from_checkpoint=True: every checkpoint in {output_dir!r} is damaged "
                                     f"({damaged}); nothing was changed: restore them, or pass "
                                     "--overwrite_output_dir true without --resume_from_checkpoint to train from "
                                     "scratch over them")
                logger.warning("resume_from_checkpoint=True: %s holds no complete checkpoint (its first save was "
                               "interrupted): training from scratch", output_dir)
                return None
        else:
            checkpoint = str(resume_from_checkpoint)
            # method state files are left to `restore`, whose messages say what a missing one means
            reason = incomplete_reason(checkpoint) if os.path.isdir(checkpoint) else "no such folder"
            if reason is not None:
                raise ValueError(f"resume_from_checkpoint: {checkpoint!r} cannot be resumed from ({reason}); pass "
                                 "true to resume from the newest complete checkpoint")
        with open(os.path.join(checkpoint, TRAINER_STATE_FILE), encoding="utf-8") as handle:
            saved = json.load(handle)
        end = args.max_steps if args.max_steps > 0 else saved.get("max_steps", 0)
        if end and saved.get("global_step", 0) >= end:
            raise RunFinished(f"{checkpoint} is at step {saved['global_step']} of max_steps {end}: the run has "
                              "finished, nothing to train (raise max_steps to train further)", checkpoint)
        return checkpoint

    def _task_journal(self) -> str | None:
        """The task's journal of paid calls in output_dir (`Task.journal_file`, e.g. the molecule task's oracle
        calls) when one holds something, else None."""
        name = getattr(self.trainer.task, "journal_file", None)
        path = os.path.join(self.trainer.args.output_dir, name) if name else None
        return path if path is not None and os.path.isfile(path) and os.path.getsize(path) > 0 else None

    def restore(self, checkpoint: str) -> None:
        """Give the trainer back divrl's state from `checkpoint` (after transformers restored the optimizer): the
        population's, the objective's, the methods' and this process's task state; a plain GRPOTrainer checkpoint is
        accepted, with a warning, only when this run keeps no such state."""
        trainer = self.trainer
        path = os.path.join(checkpoint, STATE_FILE)
        if not os.path.exists(path) and not self.needs_state_file():
            logger.warning("resume_from_checkpoint: %s has no %s (a GRPOTrainer checkpoint?); the enabled methods "
                           "keep no state, so training resumes from its model, optimizer and trainer state",
                           checkpoint, STATE_FILE)
            return
        if not os.path.exists(path):
            raise ValueError(f"resume_from_checkpoint: {checkpoint!r} has no {STATE_FILE}; it was not written by a "
                             "divrl trainer, so the method state (archive, novelty memory, ...) cannot be restored")
        try:
            state = torch.load(path, weights_only=True)
        except (RuntimeError, OSError, EOFError, pickle.UnpicklingError) as error:
            raise ValueError(f"resume_from_checkpoint: {path} does not read ({' '.join(str(error).split())[:200]})"
                             ) from None
        self._refuse_newly_enabled(state, checkpoint)
        if trainer.population is not None:  # first: it swaps in the active member's method state
            trainer.population.load_state_dict(self._saved_part(state, "population", checkpoint))
        if trainer.objective is not None:
            trainer.objective.load_state_dict(self._saved_part(state, "objective", checkpoint))
        try:
            trainer.load_method_state_dict(state)
        except ValueError as error:
            raise ValueError(f"resume_from_checkpoint: {path}: {error}") from None
        self._load_task_state(state.get("task"), checkpoint)

    def _refuse_newly_enabled(self, state: dict[str, Any], checkpoint: str) -> None:
        """Refuse to resume with a stateful method the checkpoint's run did not enable (e.g. `--qd true` added on
        resume): its state would silently start empty. Checkpoints from before the `methods` record go unchecked."""
        saved = state.get("methods")
        if saved is None:
            return
        new = [method for name, method in self.stateful_methods().items() if name not in saved]
        if new:
            flags = ", ".join(f"--{method.switch} {getattr(self.trainer.args, method.switch)}" for method in new)
            raise ValueError(
                f"resume_from_checkpoint: {checkpoint!r} was saved by a run without "
                f"{', '.join(method.switch for method in new)} (its stateful methods: {', '.join(saved) or 'none'}); "
                f"this config sets {flags}, whose state ({', '.join(method.state_key for method in new)}) would "
                "start empty: resume with the run's config, "
                "or start a new run")

    def _saved_part(self, state: dict[str, Any], part: str, checkpoint: str) -> Any:
        """The checkpoint's `part` ('population' or 'objective'), read from its own file in a checkpoint written
        before they shared `divrl_state.pt`; a ValueError when the checkpoint's run had none."""
        saved = state.get(part)
        if part not in state:  # the three-file layout
            legacy = os.path.join(checkpoint, LEGACY_STATE_FILES[part])
            saved = torch.load(legacy, weights_only=True) if os.path.exists(legacy) else None
        if saved is None:
            which = "a population" if part == "population" else f"an objective ({self.trainer.objective.switch})"
            raise ValueError(f"resume_from_checkpoint: {checkpoint!r} has no {part} state; it was not written by "
                             f"{which} run, so its state cannot be restored")
        return saved

    def _load_task_state(self, task_states: list[dict[str, Any]] | None, checkpoint: str) -> None:
        """Give each process back its own task state; refuse a checkpoint from another process count or task."""
        task, accelerator = self.trainer.task, self.trainer.accelerator
        keeps_state = task is not None and hasattr(task, "load_state_dict")
        if task_states is None and not keeps_state:
            return
        if task_states is None or not keeps_state:
            raise ValueError(f"resume_from_checkpoint: {checkpoint!r} was saved with a task "
                             f"{'without' if task_states is None else 'with'} state (reward cache, diversity filter, "
                             "...), this run's task disagrees")
        if len(task_states) != accelerator.num_processes:
            raise ValueError(f"resume_from_checkpoint: {checkpoint!r} holds the task state of {len(task_states)} "
                             f"process(es), this run has {accelerator.num_processes}: resume with as many")
        task.load_state_dict(task_states[accelerator.process_index])


FINAL_STAGING = ".final-save"  # the final model is written here, then moved into output_dir file by file


def final_save_done(output_dir: str) -> bool:
    """Whether `output_dir` holds a finished run's final save: its trainer_state.json, moved in last."""
    return os.path.isfile(os.path.join(output_dir, TRAINER_STATE_FILE))


def save_final(trainer: Any, output_dir: str) -> None:
    """The run's final save (the model or adapter, tokenizer, model card, trainer_state.json) into `output_dir`,
    written into a staging folder first and moved into place file by file, trainer_state.json last, so that a failed
    save leaves no partial file behind; a write failure becomes one CheckpointSaveError line saying which
    checkpoint holds the weights and that a resume writes the final save."""
    import shutil

    staging = os.path.join(output_dir, FINAL_STAGING)
    if trainer.args.should_save:
        shutil.rmtree(staging, ignore_errors=True)
    try:
        trainer.save_model(staging)
        if trainer.args.should_save:
            trainer.state.save_to_json(os.path.join(staging, TRAINER_STATE_FILE))
            names = sorted(os.listdir(staging), key=lambda name: name == TRAINER_STATE_FILE)
            for name in names:
                target = os.path.join(output_dir, name)
                if os.path.isdir(target) and not os.path.islink(target):
                    shutil.rmtree(target)
                os.replace(os.path.join(staging, name), target)
    except Exception as error:
        if not is_write_failure(error):
            raise
        free = shutil.disk_usage(output_dir).free
        written = _folder_bytes(staging) if os.path.isdir(staging) else 0
        shutil.rmtree(staging, ignore_errors=True)
        last = last_complete_checkpoint(output_dir)
        held = (f"{os.path.basename(last)} holds the trained weights: free space, then run again with "
                "--resume_from_checkpoint true to write the final save" if last else "no checkpoint holds the weights")
        raise CheckpointSaveError(
            f"saving the final model into {output_dir!r} failed: {_write_failure_cause(error, free, written)} "
            f"({free / 2**20:.1f} MiB free); nothing of it was left behind and {held}") from error
    finally:
        if trainer.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)
