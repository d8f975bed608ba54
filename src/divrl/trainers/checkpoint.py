"""Crash-safe method state in Trainer checkpoints, and resuming from the latest COMPLETE checkpoint.

transformers' `Trainer._save_checkpoint` (5.x) writes the model, optimizer, scheduler, RNG states and, last,
`trainer_state.json` into `checkpoint-N`, and only then rotates older checkpoints away (`save_total_limit`).
divrl's trainers write their method state files (`divrl_state.pt`, `population_state.pt`, `flowrl_log_z.pt`)
into `checkpoint-N` BEFORE calling it, each atomically (a temporary file renamed into place), so:
- a checkpoint with a readable `trainer_state.json` holds every method state file of the run that wrote it;
- a process killed anywhere inside a save leaves the previous checkpoints untouched (rotation comes last) and
  at most an incomplete `checkpoint-N` (no or a truncated `trainer_state.json`, or a method state file missing),
  which `resume_from_checkpoint=True` skips with a one-line warning naming it (`last_complete_checkpoint`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)

TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME: the last file of a checkpoint
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


def incomplete_reason(checkpoint: str, required_files: Sequence[str] = ()) -> str | None:
    """Why `checkpoint` cannot be resumed from (its save was interrupted), or None when it is complete."""
    state = os.path.join(checkpoint, TRAINER_STATE_FILE)
    if not os.path.isfile(state):
        return f"no {TRAINER_STATE_FILE}"
    try:
        with open(state, encoding="utf-8") as handle:
            json.load(handle)
    except (OSError, ValueError):
        return f"unreadable {TRAINER_STATE_FILE}"
    missing = [name for name in required_files if not os.path.isfile(os.path.join(checkpoint, name))]
    return f"no {', '.join(missing)}" if missing else None


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
        logger.warning("resume_from_checkpoint=True: skipping incomplete checkpoint %s (%s; its save was "
                       "interrupted)", path, reason)
    return None
