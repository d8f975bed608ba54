"""The frozen initial policy a divergence or FlowRL's residual needs as reference when TRL loads none (beta = 0, no
PEFT: with PEFT the reference is the policy with its adapter disabled), prepared the way TRL prepares its own."""

from __future__ import annotations

import copy
from typing import Any

import torch
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, disable_dropout_in_model, get_config_model_id

from divrl.methods import active


def load_reference_model(trainer: Any, quantization_config: Any, from_path: bool) -> torch.nn.Module:
    """`trainer`'s initial policy as a frozen reference: loaded from its path when the trainer was given one, else a
    copy of the model object passed in (its weights may differ from any path, e.g. after earlier training in the same
    script)."""
    args = trainer.args
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        raise ValueError("DivRLConfig.divergence without PEFT under DeepSpeed/FSDP: use peft_config (the reference "
                         "is then the adapter-disabled model) or set beta > 0 so TRL prepares the reference")
    if from_path:
        kwargs = dict(args.model_init_kwargs or {})
        if quantization_config is not None:
            kwargs["quantization_config"] = quantization_config
        kwargs.setdefault("dtype", trainer.model.dtype)
        kwargs.setdefault("attn_implementation", trainer.model.config._attn_implementation)
        name = get_config_model_id(trainer.model.config)
        try:
            reference = create_model_from_path(name, **kwargs)
        except (OSError, ValueError) as exc:
            needing = " / ".join(m.switch for m in active(args) if m.needs_reference_logps(args))
            raise ValueError(
                f"DivRLConfig.{needing} needs the initial policy as "
                f"reference; loading it from {name!r} failed ({exc}). Pass the model as a path, or train with "
                "peft_config (reference = adapter disabled)."
            ) from exc
        add_fused_lm_head(reference, temperature=trainer.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32)
    else:  # the copy carries the policy's fused LM head already
        reference = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model)).requires_grad_(False)
    if args.disable_dropout:
        disable_dropout_in_model(reference)
    return trainer.accelerator.prepare_model(reference, evaluation_mode=True)
