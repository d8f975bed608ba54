"""Shared pieces of the trainer tests: small configs, data, a toy task with every hook, weight snapshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from divrl.testing import ToyTask, distinct_chars_reward, text_of  # noqa: F401 (the tests' toy task)

PROMPTS = ["solve 2 + 3", "the answer is", "one two three", "a molecule ring"]


def base_settings(out_dir: Path, **overrides: Any) -> dict[str, Any]:
    """GRPOConfig settings for tiny CPU runs: 4 completions per prompt, 8 tokens, 2 steps, nothing saved."""
    settings: dict[str, Any] = dict(
        output_dir=str(out_dir), use_cpu=True, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=8, max_steps=2, learning_rate=0.05, logging_steps=1, report_to=[],
        save_strategy="no", disable_tqdm=True, seed=0, bf16=False,  # fp32: exact comparisons, fast on CPU
        # GRPOConfig's default, by the name transformers 5 reads (GRPOConfig sets it by the deprecated one, warning)
        activation_checkpointing=True,
    )
    settings.update(overrides)
    return settings


def make_config(out_dir: Path, **overrides: Any):
    """A DivRLConfig with `base_settings`."""
    from divrl import DivRLConfig

    return DivRLConfig(**base_settings(out_dir, **overrides))


def prompt_dataset(prompts: list[str] = PROMPTS, conversational: bool = False):
    """A `datasets.Dataset` with a prompt column (plain text or single-turn chat)."""
    from datasets import Dataset

    rows = [[{"role": "user", "content": p}] for p in prompts] if conversational else list(prompts)
    return Dataset.from_dict({"prompt": rows})


def lora_config(**overrides: Any):
    from peft import LoraConfig

    settings: dict[str, Any] = dict(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    settings.update(overrides)
    return LoraConfig(**settings)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def metric_keys(log_history: list[dict]) -> set[str]:
    return {key for entry in log_history for key in entry}


def logged(log_history: list[dict], key: str) -> list[float]:
    """The per-step values of one logged metric."""
    return [entry[key] for entry in log_history if key in entry]


def randomize_lora(model: torch.nn.Module, seed: int = 0, scale: float = 0.3) -> None:
    """Give every LoRA B matrix seeded random values, so the policy differs from the reference."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * scale)


def completion_logps(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     num_completion: int, temperature: float = 1.0) -> torch.Tensor:
    """log pi(token) of the last `num_completion` tokens from a plain forward (independent of TRL's kernel)."""
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits.float()
    logps = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    targets = input_ids[:, 1:].unsqueeze(-1)
    return logps.gather(-1, targets).squeeze(-1)[:, -num_completion:]
