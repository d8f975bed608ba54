"""divrl.sampling: batching arithmetic, stop strings, config checks, and real sampling with a tiny model."""

from __future__ import annotations

from pathlib import Path

import pytest

from divrl.sampling import (
    SamplingConfig,
    TransformersSampler,
    _generation_groups,
    load_for_sampling,
    make_sampler,
    truncate_at_stop,
)


@pytest.mark.parametrize(("prompts", "n", "batch"), [(5, 3, 8), (2, 20, 8), (7, 1, 3), (1, 8, 8), (3, 5, 1)])
def test_generation_groups_give_n_per_prompt_within_the_batch(prompts: int, n: int, batch: int) -> None:
    groups = _generation_groups(prompts, n, batch)
    per_prompt = [0] * prompts
    for indices, count in groups:
        assert len(indices) * count <= batch
        for i in indices:
            per_prompt[i] += count
    assert per_prompt == [n] * prompts


def test_truncate_at_stop() -> None:
    assert truncate_at_stop("A->B\nEND\nmore", ["\nEND"]) == "A->B"
    assert truncate_at_stop("abc", ["x", ""]) == "abc"
    assert truncate_at_stop("a;b,c", [",", ";"]) == "a"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"top_p": 0}, "top_p"),
        ({"temperature": -1}, "temperature"),
        ({"batch_size": 0}, "batch_size"),
        ({"top_k": -2}, "top_k"),
    ],
)
def test_config_is_checked(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingConfig(**kwargs)


def test_missing_model_path_and_unknown_backend_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_for_sampling(str(tmp_path / "nothing" / "here"))
    with pytest.raises(ValueError, match="unknown sampling backend"):
        make_sampler(str(tmp_path), SamplingConfig(), backend="tgi")


@pytest.mark.slow
def test_tiny_model_samples_n_per_prompt_for_text_and_chat(tiny_qwen3: Path) -> None:
    config = SamplingConfig(max_new_tokens=5, batch_size=4, stop=("\nEND",))
    sampler = make_sampler(str(tiny_qwen3), config, quantize="none")
    assert isinstance(sampler, TransformersSampler) and sampler.has_chat_template
    out = sampler(["Top view:", [{"role": "user", "content": "Graph?"}], "x"], 3)
    assert [len(o) for o in out] == [3, 3, 3]
    assert all(isinstance(c, str) and "\nEND" not in c for o in out for c in o)
    with pytest.raises(ValueError, match="list of prompts"):
        sampler("one prompt", 2)
    with pytest.raises(ValueError, match="n \\(completions per prompt\\)"):
        sampler(["p"], 0)

    greedy = TransformersSampler(sampler.model, sampler.tokenizer, SamplingConfig(max_new_tokens=5, temperature=0))
    first, second = greedy(["same prompt", "same prompt"], 2)
    assert first == second and first[0] == first[1]


@pytest.mark.slow
def test_lora_adapter_directory_loads_on_its_base(tiny_qwen3: Path, tmp_path: Path) -> None:
    """A TRL LoRA checkpoint (adapter_config.json, no config.json) samples on its base model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    adapter_dir = tmp_path / "checkpoint-1"
    get_peft_model(base, LoraConfig(r=2, target_modules="all-linear")).save_pretrained(adapter_dir)
    AutoTokenizer.from_pretrained(tiny_qwen3).save_pretrained(adapter_dir)
    assert not (adapter_dir / "config.json").exists()
    model, tokenizer = load_for_sampling(str(adapter_dir), quantize="none")
    assert type(model).__name__.startswith("Peft")
    out = TransformersSampler(model, tokenizer, SamplingConfig(max_new_tokens=3))(["hello"], 2)
    assert len(out[0]) == 2


@pytest.mark.slow
def test_chat_prompt_without_template_is_refused(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    tokenizer.chat_template = None
    sampler = TransformersSampler(AutoModelForCausalLM.from_pretrained(tiny_qwen3), tokenizer, SamplingConfig())
    with pytest.raises(ValueError, match="chat template"):
        sampler([[{"role": "user", "content": "hi"}]], 1)
