"""LoRA soups on a real PEFT model: exact in delta-W space for every targeted module, then a best rank-r
projection whose error is the discarded singular values; refused adapter kinds; config validation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from divrl.trainers.population import (
    adapter_parameters,
    check_population_adapter,
    copy_adapter,
    lora_layers,
    soup_adapters,
    soup_deltas,
)

MEMBERS = ["default", "member_1", "member_2"]


def peft_model(model_dir: Path, names: list[str] = MEMBERS, seed: int = 0, four_bit: bool = False, **lora: Any):
    """A tiny model with one LoRA adapter per name, every factor random (B too, so deltas are non-zero)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    settings: dict[str, Any] = dict(r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0)
    settings.update(lora)
    quantization = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32) if four_bit else None
    base = AutoModelForCausalLM.from_pretrained(model_dir, quantization_config=quantization)
    model = get_peft_model(base, LoraConfig(**settings))
    for name in names[1:]:
        model.add_adapter(name, LoraConfig(**settings))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in names:
            for param in adapter_parameters(model, name):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model


def deltas(model: Any, adapter: str) -> dict[str, torch.Tensor]:
    """PEFT's own dW = s B A of `adapter` for every LoRA layer (the independent reference)."""
    return {name: layer.get_delta_weight(adapter).detach().clone() for name, layer in lora_layers(model, adapter)}


def test_soup_of_one_adapter_is_that_adapter(tiny_qwen3: Path) -> None:
    model = peft_model(tiny_qwen3)
    expected = deltas(model, "member_1")
    error = soup_adapters(model, ["member_1"], ["member_2"])
    assert error == pytest.approx(0.0, abs=1e-5)
    for name, delta in deltas(model, "member_2").items():
        torch.testing.assert_close(delta, expected[name], atol=1e-5, rtol=1e-5)


def test_soup_of_identical_adapters_is_that_adapter(tiny_qwen3: Path) -> None:
    model = peft_model(tiny_qwen3)
    copy_adapter(model, "default", "member_1")
    copy_adapter(model, "default", "member_2")
    expected = deltas(model, "default")
    soup_adapters(model, MEMBERS, MEMBERS)
    for member in MEMBERS:
        for name, delta in deltas(model, member).items():
            torch.testing.assert_close(delta, expected[name], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("use_rslora", "four_bit"), [(False, False), (True, False), (False, True)])
def test_soup_of_distinct_adapters_is_the_weighted_sum_of_deltas(tiny_qwen3: Path, use_rslora: bool,
                                                                 four_bit: bool) -> None:
    # rsLoRA (s = alpha / sqrt(r)) is exact here; on a 4-bit base the soup never touches the quantised weights.
    model = peft_model(tiny_qwen3, use_rslora=use_rslora, four_bit=four_bit)
    assert four_bit == all(type(layer).__name__ == "Linear4bit" for _, layer in lora_layers(model, "default"))
    weights = [0.5, 0.3, 0.2]
    member_deltas = [deltas(model, m) for m in MEMBERS]
    soups = {name: delta for name, _, delta in soup_deltas(model, MEMBERS, weights)}
    assert set(soups) == set(member_deltas[0]) and len(soups) == 14  # 2 layers x 7 linear modules
    for name, soup in soups.items():
        expected = sum(w * d[name] for w, d in zip(weights, member_deltas))
        torch.testing.assert_close(soup, expected, atol=1e-6, rtol=1e-5)
    # The naive average of A's and B's differs (cross terms B_i A_j): the test above can tell them apart.
    name, layer = lora_layers(model, "default")[0]
    naive = layer.scaling["default"] * (
        sum(w * layer.lora_B[m].weight for w, m in zip(weights, MEMBERS))
        @ sum(w * layer.lora_A[m].weight for w, m in zip(weights, MEMBERS))
    )
    assert not torch.allclose(naive, soups[name], atol=1e-3)


@pytest.mark.parametrize("rank", [None, 2])
def test_projection_error_is_the_discarded_singular_values(tiny_qwen3: Path, rank: int | None) -> None:
    model = peft_model(tiny_qwen3)
    exact = {name: delta for name, _, delta in soup_deltas(model, MEMBERS)}
    kept = rank or 4
    discarded = total = 0.0
    for delta in exact.values():
        singular = torch.linalg.svdvals(delta.double())
        assert (singular[4 * len(MEMBERS) :] < 1e-5).all()  # the exact soup has rank <= M r
        discarded += float((singular[kept:] ** 2).sum())
        total += float((singular**2).sum())

    error = soup_adapters(model, MEMBERS, ["member_2"], rank=rank)

    assert error == pytest.approx(math.sqrt(discarded / total), rel=1e-4)
    assert error > 0.05  # distinct random adapters: a rank-r soup really truncates
    residual = sum(float((exact[n] - d).square().sum()) for n, d in deltas(model, "member_2").items())
    assert math.sqrt(residual / total) == pytest.approx(error, rel=1e-3)
    for name, layer in lora_layers(model, "member_2"):
        assert not layer.lora_A["member_2"].weight[kept:].any() and not layer.lora_B["member_2"].weight[:, kept:].any()
        best = torch.linalg.svdvals(exact[name])[:kept]  # Eckart-Young: the projection keeps the top-r spectrum
        torch.testing.assert_close(torch.linalg.svdvals(layer.get_delta_weight("member_2"))[:kept], best,
                                   atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("lora", "message"),
    [
        ({"use_dora": True}, "use_dora"),
        ({"lora_bias": True}, "lora_bias"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"target_modules": ["embed_tokens", "q_proj"]}, "not a linear layer"),
    ],
)
def test_unsupported_adapters_are_refused(tiny_qwen3: Path, lora: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_population_adapter(peft_model(tiny_qwen3, names=["default"], **lora))


def test_a_model_without_lora_is_refused(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM

    with pytest.raises(ValueError, match="peft_config=peft.LoraConfig"):
        check_population_adapter(AutoModelForCausalLM.from_pretrained(tiny_qwen3))


@pytest.mark.parametrize(
    ("field", "value"),
    [("population_size", 0), ("population_top_m", 6), ("population_top_m", 0), ("population_interval", 0),
     ("population_sigma", -0.1), ("population_soup_rank", 0), ("population_held_prompts", 0)],
)
def test_config_names_the_misconfigured_field(field: str, value: Any, tmp_path: Path) -> None:
    from divrl import DivRLConfig

    with pytest.raises(ValueError, match=f"DivRLConfig.{field} "):
        DivRLConfig(output_dir=str(tmp_path), use_cpu=True, population=True, **{field: value})
