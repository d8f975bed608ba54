"""The tiny checkpoints load like hub models and the tokenizer round-trips text and chat templates."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_tiny_checkpoint_loads_and_generates(tiny_model: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    text = "the answer is 42, CCO c1ccccc1"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(prompt, return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert ids["input_ids"].shape[1] < out.shape[1] <= ids["input_ids"].shape[1] + 4
    assert model.config.vocab_size == len(tokenizer)
    assert sum(p.numel() for p in model.parameters()) < 100_000
    assert torch.isfinite(model(**ids).logits).all()


def test_unknown_architecture_is_refused(tmp_path: Path) -> None:
    from divrl.testing import build_tiny_model

    with pytest.raises(ValueError, match="unknown architecture 'llama'"):
        build_tiny_model("llama", tmp_path)
