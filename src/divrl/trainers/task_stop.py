"""Stop training when the task says its budget is spent (the optional `Task.stop_reason` hook): e.g. a molecule
task's oracle budget, where a run is judged by what it found within a fixed number of oracle calls (PMO)."""

from __future__ import annotations

import logging
from typing import Any

import torch
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class TaskStopCallback(TrainerCallback):
    """After each optimizer step, ask the task's `stop_reason()`; when any process's task gives one, every process
    stops after this step and the Trainer saves a checkpoint, so the run ends with its state (the budget's history)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.reason: str | None = None

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        reason = self.trainer.task.stop_reason()
        accelerator = self.trainer.accelerator
        flag = torch.tensor([reason is not None], dtype=torch.float32, device=accelerator.device)
        if accelerator.reduce(flag, reduction="sum").item() > 0:  # every rank stops together
            self.reason = reason or "another process's task asked to stop"
            if state.is_world_process_zero:
                logger.warning("stopping after step %d: %s", state.global_step, self.reason)
            control.should_training_stop = True
            control.should_save = args.save_strategy != "no"
        return control
