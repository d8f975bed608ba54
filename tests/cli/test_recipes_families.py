"""Model-family recipes build their trainer on tiny models of the family's architecture (no hub, CPU).

Qwen3-30B-A3B is a MoE (fused expert weights, a router `gate`); Gemma-3-4B-it loads as
Gemma3ForConditionalGeneration (a SigLIP vision tower beside the language model). "all-linear" LoRA is wrong
for both; the recipes name their targets, and these tests check what LoRA actually wraps.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from divrl.train import build_trainer, parse_recipe

RECIPES = Path(__file__).parents[2] / "recipes"
CPU = ["--use_cpu", "true", "--bf16", "false", "--dtype", "float32"]
spec = importlib.util.spec_from_file_location("recipe_generator", RECIPES / "generate.py")
generator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generator)


def _save_tiny(config, out: Path) -> Path:
    """Save a random model of `config` next to the local tokenizer in `out`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    return out


def _token_ids(out: Path) -> dict:
    """Vocabulary size and special ids of the local tokenizer, written to `out`."""
    from transformers import AutoTokenizer

    from divrl.testing import build_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(build_tokenizer(out))
    return dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                bos_token_id=None)


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-MoE checkpoint (4 experts, top 2), the architecture of Qwen3-30B-A3B."""
    from transformers import Qwen3MoeConfig

    out = tmp_path_factory.mktemp("tiny_moe")
    config = Qwen3MoeConfig(**_token_ids(out), hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                            num_experts=4, num_experts_per_tok=2, tie_word_embeddings=True)
    return _save_tiny(config, out)


@pytest.fixture(scope="module")
def tiny_gemma3_multimodal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Gemma3ForConditionalGeneration checkpoint (SigLIP vision tower + Gemma3 text), as Gemma-3-4B-it."""
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

    out = tmp_path_factory.mktemp("tiny_gemma3_mm")
    ids = _token_ids(out)
    text = Gemma3TextConfig(**ids, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, head_dim=16, sliding_window=64, query_pre_attn_scalar=16)
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=32, patch_size=8)
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                          image_token_index=ids["vocab_size"] - 1)
    return _save_tiny(config, out)


def _lora_modules(trainer) -> list[str]:
    """Names of the modules LoRA wrapped in the trainer's model."""
    return [name for name, module in trainer.model.named_modules() if hasattr(module, "lora_A")]


@pytest.mark.parametrize("method", ["grpo", "maxent"])
def test_moe_recipe_builds_its_trainer_with_lora_on_attention_only(method: str, tiny_moe: Path, tmp_path: Path):
    recipe = RECIPES / "qwen3-30b-a3b" / "hypospace-voxel" / f"{method}.yaml"
    args = parse_recipe(["--config", str(recipe), *CPU, "--model_name_or_path", str(tiny_moe),
                         "--output_dir", str(tmp_path)])
    assert args[2].lora_dropout == 0.05  # the paper's dropout stays: attention projections are plain Linear
    wrapped = _lora_modules(build_trainer(*args))
    assert {name.rsplit(".", 1)[-1] for name in wrapped} == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert len(wrapped) == 2 * 4  # 2 layers; nothing on the router `gate` or the fused experts


def test_gemma3_multimodal_recipe_puts_no_lora_on_the_vision_tower(tiny_gemma3_multimodal: Path, tmp_path: Path):
    from safetensors import safe_open

    recipe = RECIPES / "gemma-3-4b-it" / "hypospace-voxel" / "ips.yaml"
    args = parse_recipe(["--config", str(recipe), *CPU, "--model_name_or_path", str(tiny_gemma3_multimodal),
                         "--output_dir", str(tmp_path)])
    trainer = build_trainer(*args)
    assert type(trainer.model.get_base_model()).__name__ == "Gemma3ForConditionalGeneration"
    wrapped = _lora_modules(trainer)
    assert wrapped and all(".language_model.layers." in name for name in wrapped), wrapped
    assert {name.rsplit(".", 1)[-1] for name in wrapped} == {
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    trainer.save_model(str(tmp_path / "adapter"))
    with safe_open(str(tmp_path / "adapter" / "adapter_model.safetensors"), "pt") as saved:
        keys = list(saved.keys())
    assert keys and not [key for key in keys if "vision" in key or "multi_modal" in key]


def test_sharded_family_has_no_method_that_refuses_zero3():
    methods = {path.stem for path in (RECIPES / "qwen3-30b-a3b").glob("*/*.yaml")}
    assert methods == {"grpo", "ips", "qd", "maxent", "fkl", "js", "count", "unlikely", "passk", "clip-higher",
                       "clip-cov", "kl-cov", "top-entropy"}
    assert generator.MODELS["qwen3-30b-a3b"]["accelerate_config"] == "deepspeed_zero3.yaml"
