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
After the save divrl writes `divrl_manifest.json` (every file's size), last: a checkpoint whose files no longer
match it (a truncated adapter or optimizer, e.g. a disk that filled up, a copy cut short; a JSON file only when it
no longer parses, since people edit trainer states) is skipped the same way.
A checkpoint without a manifest (older runs, or a kill between the save and the manifest) is checked by reading
what can be read cheaply: JSON files parse, safetensors headers fit their files, torch files' zip directories open.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import zipfile
from collections.abc import Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME: the last file of a checkpoint
MANIFEST_FILE = "divrl_manifest.json"  # written after everything else: each file's size in bytes
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


def write_manifest(checkpoint: str) -> None:
    """Record every file's size in `checkpoint`, atomically; call it when the checkpoint is complete."""
    temporary = os.path.join(checkpoint, f"{MANIFEST_FILE}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"files": _files(checkpoint)}, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, os.path.join(checkpoint, MANIFEST_FILE))


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


def incomplete_reason(checkpoint: str, required_files: Sequence[str] = ()) -> str | None:
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
    missing = [name for name in required_files if not os.path.isfile(os.path.join(checkpoint, name))]
    if missing:
        return f"no {', '.join(missing)}"
    sizes = _files(checkpoint)
    try:
        with open(os.path.join(checkpoint, MANIFEST_FILE), encoding="utf-8") as handle:
            recorded = json.load(handle)["files"]
    except FileNotFoundError:
        recorded = None
    except (OSError, ValueError, KeyError, TypeError):
        return f"unreadable {MANIFEST_FILE}"
    if recorded is not None:  # a JSON file may be edited by hand: it counts as damaged only when it does not parse
        changed = [f"{name} ({sizes.get(name, 0)} of {size} bytes)" for name, size in sorted(recorded.items())
                   if sizes.get(name) != size and not (name.endswith(".json") and name in sizes
                                                       and _unreadable(os.path.join(checkpoint, name)) is None)]
        return f"{', '.join(changed)} differ from {MANIFEST_FILE}" if changed else None
    unreadable = [f"{name} {why}" for name in sorted(sizes) if (why := _unreadable(os.path.join(checkpoint, name)))]
    return ", ".join(unreadable) or None


def last_complete_checkpoint(output_dir: str, required_files: Sequence[str] = ()) -> str | None:
    """The highest-step complete `checkpoint-N` in `output_dir` (None if there is none); every newer incomplete
    one is skipped with a one-line warning naming it."""
    if not os.path.isdir(output_dir):
        return None
    steps = sorted(((int(m.group(1)), name) for name in os.listdir(output_dir)
                    if (m := _CHECKPOINT_DIR.match(name)) and os.path.isdir(os.path.join(output_dir, name))),
                   reverse=True)
    for _, name in steps:
        path = os.path.join(output_dir, name)
        reason = incomplete_reason(path, required_files)
        if reason is None:
            return path
        logger.warning("resume_from_checkpoint=True: skipping incomplete checkpoint %s (%s: its save was "
                       "interrupted or a file was damaged since)", path, reason)
    return None
