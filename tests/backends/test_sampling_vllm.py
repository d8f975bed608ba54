"""The vLLM sampler with a fake `vllm` module: LoRA adapter directories, dtype pass-through, refused quantization."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from divrl.sampling import SamplingConfig, VLLMSampler, make_sampler


class FakeLLM:
    """Records how it was built and called; answers `<prompt>#<i>` for each of the n samples."""

    built: list[FakeLLM] = []

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model = model
        self.kwargs = kwargs
        self.calls: list[tuple[str, list, Any]] = []
        FakeLLM.built.append(self)

    def get_tokenizer(self) -> Any:
        return types.SimpleNamespace(chat_template="{{ messages }}")

    def _answer(self, method: str, prompts: list, params: Any, use_tqdm: bool, lora_request: Any) -> list:
        self.calls.append((method, prompts, lora_request))
        texts = [p if isinstance(p, str) else p[-1]["content"] for p in prompts]
        samples = [[types.SimpleNamespace(text=f"{t}#{i}") for i in range(params.n)] for t in texts]
        return [types.SimpleNamespace(outputs=outputs) for outputs in samples]

    def generate(self, prompts: list, params: Any, use_tqdm: bool = True, lora_request: Any = None) -> list:
        return self._answer("generate", prompts, params, use_tqdm, lora_request)

    def chat(self, messages: list, params: Any, use_tqdm: bool = True, lora_request: Any = None) -> list:
        return self._answer("chat", messages, params, use_tqdm, lora_request)


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


class FakeLoRARequest:
    def __init__(self, lora_name: str, lora_int_id: int, lora_path: str) -> None:
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> type[FakeLLM]:
    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = FakeLLM, FakeSamplingParams
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = FakeLoRARequest
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora", types.ModuleType("vllm.lora"))
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    monkeypatch.setattr(FakeLLM, "built", [])
    return FakeLLM


def _model(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def _adapter(path: Path, base: str | None, rank: int = 2, tokenizer: bool = True) -> Path:
    path.mkdir(parents=True)
    config = {"peft_type": "LORA", "r": rank, **({"base_model_name_or_path": base} if base else {})}
    (path / "adapter_config.json").write_text(json.dumps(config))
    if tokenizer:
        (path / "tokenizer_config.json").write_text("{}")
    return path


def test_lora_adapter_runs_on_its_base_with_a_lora_request(fake_vllm: type[FakeLLM], tmp_path: Path) -> None:
    base = _model(tmp_path / "base")
    adapter = _adapter(tmp_path / "run" / "checkpoint-4", str(base))
    sampler = make_sampler(str(adapter), SamplingConfig(seed=3), backend="vllm", quantize="none", dtype="bfloat16")
    (llm,) = fake_vllm.built
    assert llm.model == str(base)
    assert llm.kwargs == {
        "seed": 3,
        "dtype": "bfloat16",
        "enable_lora": True,
        "max_lora_rank": 8,  # the smallest rank vLLM allows that holds r=2
        "tokenizer": str(adapter),
    }
    out = sampler(["plain", [{"role": "user", "content": "chat"}]], 2)
    assert out == [["plain#0", "plain#1"], ["chat#0", "chat#1"]]
    assert [(method, request.lora_path, request.lora_int_id) for method, _, request in llm.calls] == [
        ("generate", str(adapter), 1),
        ("chat", str(adapter), 1),
    ]


def test_plain_model_gets_dtype_and_no_lora(fake_vllm: type[FakeLLM], tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    sampler = make_sampler(str(model), SamplingConfig(), backend="vllm", dtype="float16")
    assert sampler.has_chat_template
    (llm,) = fake_vllm.built
    assert llm.model == str(model) and llm.kwargs == {"seed": 0, "dtype": "float16"}
    sampler(["p"], 1)
    assert llm.calls[0][2] is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"quantize": "4bit"}, "quantize '4bit' is not supported by the vllm backend"),
        ({"dtype": "bf16"}, "dtype 'bf16' is not one vLLM accepts"),
    ],
)
def test_unsupported_quantize_and_dtype_are_refused_before_loading(
    kwargs: dict, message: str, fake_vllm: type[FakeLLM], tmp_path: Path
) -> None:
    model = _model(tmp_path / "model")
    with pytest.raises(ValueError, match=message):
        make_sampler(str(model), SamplingConfig(), backend="vllm", **kwargs)
    assert fake_vllm.built == []


@pytest.mark.parametrize(
    ("base", "rank", "message"),
    [(None, 2, "does not name its base model"), ("BASE", 1024, "LoRA rank 1024; vLLM serves ranks up to 512")],
)
def test_unusable_adapters_are_refused_before_loading(
    base: str | None, rank: int, message: str, fake_vllm: type[FakeLLM], tmp_path: Path
) -> None:
    base_path = str(_model(tmp_path / "base"))
    adapter = _adapter(tmp_path / "adapter", base_path if base == "BASE" else base, rank)
    with pytest.raises(ValueError, match=message):
        VLLMSampler(str(adapter), SamplingConfig())
    assert fake_vllm.built == []


def test_adapter_without_its_own_tokenizer_uses_the_base_one(fake_vllm: type[FakeLLM], tmp_path: Path) -> None:
    base = _model(tmp_path / "base")
    VLLMSampler(str(_adapter(tmp_path / "adapter", str(base), rank=16, tokenizer=False)), SamplingConfig())
    (llm,) = fake_vllm.built
    assert "tokenizer" not in llm.kwargs and llm.kwargs["max_lora_rank"] == 16


def test_missing_vllm_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(ValueError, match="needs the vllm package"):
        VLLMSampler(str(_model(tmp_path / "model")), SamplingConfig())
