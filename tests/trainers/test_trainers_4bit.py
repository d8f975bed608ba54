"""4-bit (bitsandbytes NF4) base + LoRA: the path users take on CUDA; bitsandbytes also runs it on CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_helpers import ToyTask, lora_config, make_config, metric_keys, prompt_dataset, snapshot

DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")),
]


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_4bit_lora_training(device: str, tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer, BitsAndBytesConfig

    from divrl import DivRLTrainer

    compute_dtype = torch.bfloat16 if device == "cuda" else torch.float32
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                      bnb_4bit_compute_dtype=compute_dtype)
    args = make_config(tmp_path, use_cpu=device == "cpu", bf16=device == "cuda", ips=True, divergence="js")
    trainer = DivRLTrainer(str(tiny_qwen3), args=args, train_dataset=prompt_dataset(),
                           processing_class=AutoTokenizer.from_pretrained(tiny_qwen3), peft_config=lora_config(),
                           quantization_config=quantization, task=ToyTask())
    assert trainer.model.get_base_model().is_loaded_in_4bit
    assert trainer.ref_model is None  # the reference is the 4-bit base with the adapter disabled: no copy
    before = snapshot(trainer.model)
    trainer.train()
    after = snapshot(trainer.model)
    assert all(before[n].equal(after[n]) for n in before if "lora_" not in n)
    assert all(not before[n].equal(after[n]) for n in before if "lora_B" in n)
    assert {"ips/max_scale", "divergence/js"} <= metric_keys(trainer.state.log_history)
