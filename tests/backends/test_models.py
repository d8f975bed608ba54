"""Model loading: name resolution, the general loader on tiny local checkpoints, LoRA defaults, embedded prep."""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import pytest
import torch

from divrl import models


def test_resolve_local_checkpoint_returns_its_path(tiny_qwen3: Path) -> None:
    assert models.resolve_model_name(str(tiny_qwen3)) == str(tiny_qwen3)


def test_resolve_hub_id_passes_through() -> None:
    assert models.resolve_model_name("google/gemma-3-4b-it") == "google/gemma-3-4b-it"


@pytest.mark.parametrize("name", ["./no/such/model", "/no/such/model", "no/such/model", "~/no-such-model"])
def test_resolve_missing_local_path_is_a_clear_error(name: str) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        models.resolve_model_name(name)


def test_resolve_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no config.json"):
        models.resolve_model_name(str(tmp_path))


@pytest.mark.parametrize("name", ["", "   "])
def test_resolve_empty_name_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        models.resolve_model_name(name)


def test_unknown_embedded_model_lists_known_ones() -> None:
    with pytest.raises(ValueError, match="gemma-3-270m"):
        models.resolve_model_name("embedded:gpt-17")


def test_embedded_cache_respects_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(models.CACHE_ENV_VAR, str(tmp_path))
    assert models.embedded_checkpoint_dir("gemma-3-270m") == tmp_path / "models" / "gemma-3-270m"


def test_load_on_cpu_falls_back_to_float32_with_message(tiny_qwen3: Path) -> None:
    messages: list[str] = []
    model, tokenizer = models.load_model_and_tokenizer(str(tiny_qwen3), log=messages.append)
    import torch

    assert not getattr(model, "is_loaded_in_4bit", False)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert tokenizer.pad_token is not None
    assert len(messages) == 1 and "no CUDA device" in messages[0] and "float32" in messages[0]


def test_the_cpu_note_is_said_once_however_often_the_model_loads(tiny_qwen3: Path) -> None:
    messages: list[str] = []
    for _ in range(3):  # the demo: each method's training, then the base model under each adapter
        models.load_model_and_tokenizer(str(tiny_qwen3), log=messages.append)
    assert len(messages) == 1 and "quantize=auto" in messages[0]


def test_load_explicit_dtype_and_no_quantization_is_silent(tiny_gemma3: Path) -> None:
    import torch

    messages: list[str] = []
    model, _ = models.load_model_and_tokenizer(str(tiny_gemma3), quantize="none", dtype="bfloat16", log=messages.append)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert messages == []


def test_load_requested_4bit_on_cpu_says_it_falls_back(tiny_qwen3: Path) -> None:
    messages: list[str] = []
    models.load_model_and_tokenizer(str(tiny_qwen3), quantize="4bit", log=messages.append)
    assert "4-bit NF4 was requested" in messages[0]


@pytest.mark.parametrize(("kwargs", "match"), [({"quantize": "8bit"}, "quantize"), ({"dtype": "float9"}, "dtype")])
def test_load_rejects_bad_options(tiny_qwen3: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        models.load_model_and_tokenizer(str(tiny_qwen3), **kwargs)


def test_unreachable_hub_id_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="embedded:gemma-3-270m"):
        models.load_model_and_tokenizer("divrl-tests/no-such-model", quantize="none")


def test_default_lora_targets_every_linear_projection_but_the_head(tiny_qwen3: Path) -> None:
    from peft import get_peft_model

    config = models.default_lora_config()
    assert (config.r, config.lora_alpha, config.lora_dropout) == (16, 32, 0.05)
    model, _ = models.load_model_and_tokenizer(str(tiny_qwen3), quantize="none")
    peft_model = get_peft_model(model, config)
    wrapped = {name.rsplit(".", 1)[-1] for name, m in peft_model.named_modules() if hasattr(m, "lora_A")}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert models.default_lora_config(r=4).r == 4


def test_missing_embedded_package_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = models.EmbeddedModel(package="divrl_no_such_package", pip_name="no-such-package", description="")
    monkeypatch.setitem(models.EMBEDDED_MODELS, "fake", spec)
    with pytest.raises(ValueError, match=r"divrl\[embedded\]"):
        models.prepare_embedded_model("fake", tmp_path / "fake", progress=lambda _: None)


def test_parallel_preparation_builds_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(models.CACHE_ENV_VAR, str(tmp_path))
    builds: list[Path] = []

    def slow_build(name: str, spec: models.EmbeddedModel, target: Path, progress: object) -> None:
        time.sleep(0.3)  # long enough for the other thread to arrive while this one builds
        target.mkdir(parents=True)
        (target / models.READY_MARKER).write_text(json.dumps({"name": name}))
        builds.append(target)

    monkeypatch.setattr(models, "_build_checkpoint", slow_build)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(models.prepare_embedded_model("gemma-3-270m"))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == [tmp_path / "models" / "gemma-3-270m"]
    assert results == builds * 3
    assert models.resolve_model_name("embedded:gemma-3-270m") == str(builds[0])


def test_prepare_model_command_reuses_a_prepared_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ckpt"
    out.mkdir()
    (out / models.READY_MARKER).write_text("{}")
    monkeypatch.setattr(models, "_build_checkpoint", lambda *a: pytest.fail("must not rebuild"))
    parser = argparse.ArgumentParser()
    models.register(parser.add_subparsers())
    args = parser.parse_args(["prepare-model", "gemma-3-270m", "--out", str(out)])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(out)
    assert "already prepared" in captured.err


@pytest.mark.real_model
@pytest.mark.slow
def test_embedded_gemma_prepares_loads_and_generates() -> None:
    """Real weights and tokenizer: prepared once into the cache (reused across runs), then generate."""
    import torch

    model, tokenizer = models.load_model_and_tokenizer("embedded:gemma-3-270m", quantize="none")
    assert models.is_prepared(models.embedded_checkpoint_dir("gemma-3-270m"))
    assert model.config.vocab_size == 262144 and model.config.num_hidden_layers == 18
    inputs = tokenizer("The capital of France is", return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    text = tokenizer.decode(ids[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "France" in text or "Paris" in text, text


def test_cpu_load_ignores_a_present_cuda_device(tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A use_cpu run on a GPU machine must not get 4-bit CUDA weights: cpu=True loads plain float32 weights."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    messages: list[str] = []
    model, _ = models.load_model_and_tokenizer(str(tiny_qwen3), cpu=True, log=messages.append)
    assert not getattr(model, "is_loaded_in_4bit", False)
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert "training on the CPU (use_cpu)" in messages[0]


def test_auto_quantization_picks_bf16_when_it_fits_and_nf4_when_not() -> None:
    gib = 2**30
    choice, reason = models.choose_quantization(weight_bytes=8 * gib, free_bytes=139 * gib)  # 4B on an H200
    assert choice == "none" and "bf16" in reason and "fits" in reason and "\n" not in reason
    choice, reason = models.choose_quantization(weight_bytes=8 * gib, free_bytes=16 * gib)  # 2 x 8 + 4 > 16
    assert choice == "4bit" and "exceeds" in reason
    assert models.choose_quantization(8 * gib, 20 * gib)[0] == "none"  # exactly 2 x 8 + 4: fits


def test_bf16_weight_bytes_counts_the_model_without_loading_it(tiny_qwen3: Path) -> None:
    from transformers import AutoModelForCausalLM

    real = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(tiny_qwen3).parameters())
    assert models.bf16_weight_bytes(str(tiny_qwen3), {"trust_remote_code": False}) == 2 * real


@pytest.mark.parametrize(("free_gib", "quantized"), [(80, False), (1, True)])
def test_auto_on_cuda_loads_by_free_memory_and_says_why(tiny_qwen3: Path, monkeypatch: pytest.MonkeyPatch,
                                                        free_gib: int, quantized: bool) -> None:
    """The CUDA branch with the device mocked: what `from_pretrained` is asked for, and the one line said."""
    loaded: dict = {}

    class Recorder:
        @staticmethod
        def from_pretrained(path, **kwargs):
            loaded.update(kwargs)
            return object()

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free_gib * 2**30, 80 * 2**30))
    monkeypatch.setattr(models, "bf16_weight_bytes", lambda path, hub_kwargs: 8 * 2**30)
    monkeypatch.setattr(models, "_auto_class", lambda path, hub_kwargs: Recorder)
    messages: list[str] = []
    models.load_model_and_tokenizer(str(tiny_qwen3), quantize="auto", log=messages.append)
    assert ("quantization_config" in loaded) is quantized
    assert loaded["dtype"] == torch.bfloat16
    assert len(messages) == 1 and messages[0].startswith("quantize=auto: ")
    assert ("4-bit NF4" in messages[0]) is quantized
