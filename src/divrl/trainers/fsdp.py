"""FSDP keeps what the user trained: with sharded state dicts (accelerate_configs/fsdp.yaml, what resume needs),
transformers' `Trainer.save_model` writes no weights at all, so a LoRA run's output_dir held no adapter. Here the
weights are also gathered into a full state dict and saved the ordinary way (a PEFT adapter for LoRA), at the end and
in every checkpoint, beside the shards: the remedy PEFT's and accelerate's FSDP guides give (a FULL_STATE_DICT save)."""

from __future__ import annotations

from typing import Any


def saves_no_weights(trainer: Any) -> bool:
    """Whether `Trainer.save_model` skips the weights: FSDP with a state dict type other than FULL_STATE_DICT."""
    if not trainer.is_fsdp_enabled:
        return False
    return "FULL_STATE_DICT" not in str(trainer.accelerator.state.fsdp_plugin.state_dict_type)


def save_gathered_weights(trainer: Any, output_dir: str) -> None:
    """Gather the sharded model on every rank (a collective) and save it from the main process as `Trainer._save`
    does: for a PEFT model, `adapter_model.safetensors` that `AutoPeftModelForCausalLM.from_pretrained` loads."""
    state_dict = trainer.accelerator.get_state_dict(trainer.model)
    if trainer.args.should_save:
        trainer._save(output_dir, state_dict=state_dict)
