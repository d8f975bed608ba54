"""Batched sampling of N completions per prompt, for the evaluators (recovery curves, molecule metrics).

A sampler maps prompts (plain strings for base models, chat message lists for instruct models) and a
count n to n completion strings per prompt: `sampler(prompts, n) -> list[list[str]]`. Evaluators take
any such callable, so tests inject chosen completions and real runs use `TransformersSampler`
(`model.generate` with do_sample and num_return_sequences, batched) or, when installed and asked for,
`VLLMSampler`. torch / transformers / vllm are imported inside functions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

Prompt = str | list[dict[str, str]]
BACKENDS = ("transformers", "vllm")
# What vLLM's `LLM(dtype=...)` accepts, and the ranks its LoRAConfig allows as `max_lora_rank`.
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class Sampler(Protocol):
    """`sampler(prompts, n)`: n completion strings for each prompt, in prompt order; `reseed(seed)` restarts the
    random stream, so the same call after the same reseed draws the same completions (what resuming relies on)."""

    has_chat_template: bool

    def __call__(self, prompts: Sequence[Prompt], n: int = 1) -> list[list[str]]: ...

    def reseed(self, seed: int) -> None: ...


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample. `batch_size` counts sequences per generate call; `stop` strings end a completion
    (generation stops there and the text is cut before them); temperature 0 means greedy decoding."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    batch_size: int = 16
    seed: int = 0
    stop: tuple[str, ...] = ()
    progress: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


def add_sampling_arguments(parser: Any, max_new_tokens: int) -> None:
    """The sampling options every evaluator shares (`--backend`, `--temperature`, ...), as one argument group."""
    group = parser.add_argument_group("sampling")
    group.add_argument("--backend", choices=["transformers", "vllm"], default="transformers")
    group.add_argument("--max-new-tokens", type=int, default=max_new_tokens)
    group.add_argument("--temperature", type=float, default=1.0)
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--top-k", type=int, default=0, help="0 = off")
    group.add_argument("--batch-size", type=int, default=16, help="sequences per generate call")
    group.add_argument("--quantize", choices=["auto", "4bit", "none"], default="auto")
    group.add_argument("--dtype", default="auto")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")
    served = parser.add_argument_group("served model (instead of loading --model here)")
    served.add_argument("--base-url", default=None, metavar="URL",
                        help="an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vllm serve, trl "
                             "vllm-serve, transformers serve, llama.cpp, hosted APIs); --model names the served model")
    served.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                        help="environment variable holding the API key (never written anywhere)")
    served.add_argument("--request-timeout", type=float, default=120.0, help="seconds per request (default 120)")
    served.add_argument("--max-concurrency", type=int, default=8, help="requests in flight at once (default 8)")


def sampling_config_from_args(args: Any, stop: tuple[str, ...] = (), progress: bool | None = None) -> SamplingConfig:
    """`SamplingConfig` from the options `add_sampling_arguments` added (plus `args.seed`); `progress` defaults
    to `not args.no_progress` (callers with their own progress bar pass False)."""
    return SamplingConfig(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        batch_size=args.batch_size,
        seed=args.seed,
        stop=stop,
        progress=not args.no_progress if progress is None else progress,
    )


def truncate_at_stop(text: str, stop: Sequence[str]) -> str:
    """`text` up to the first occurrence of any stop string."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    return text[:cut]


def _check_n(prompts: Sequence[Prompt], n: int) -> None:
    if isinstance(prompts, (str, dict)):
        raise ValueError("prompts must be a list of prompts (strings or chat message lists), not a single prompt")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (completions per prompt) must be an integer >= 1, got {n!r}")


def _generation_groups(n_prompts: int, n: int, batch_size: int) -> list[tuple[list[int], int]]:
    """Split "n completions for each prompt" into generate calls of at most `batch_size` sequences:
    (prompt indices, num_return_sequences) per call."""
    chunks = [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    groups = []
    for chunk in chunks:
        per_call = max(1, batch_size // chunk)
        groups += [(list(range(s, min(s + per_call, n_prompts))), chunk) for s in range(0, n_prompts, per_call)]
    return groups


def adapter_config(path: Path) -> dict[str, Any] | None:
    """The adapter_config.json of a PEFT adapter directory (one without config.json, e.g. a TRL LoRA checkpoint),
    None for anything else; ValueError when it is unreadable or does not name its base model."""
    config_file = path / "adapter_config.json"
    if not (path.is_dir() and config_file.is_file() and not (path / "config.json").is_file()):
        return None
    try:
        config = json.loads(config_file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read adapter config {config_file}: {exc}") from exc
    if not isinstance(config, dict) or not config.get("base_model_name_or_path"):
        raise ValueError(f"adapter {path} does not name its base model (base_model_name_or_path)")
    return config


def load_for_sampling(
    name_or_path: str, *, quantize: str = "auto", dtype: str = "auto"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Model and tokenizer for generation: a hub id, a local checkpoint, `embedded:NAME`, or a PEFT adapter
    directory (e.g. a TRL LoRA checkpoint), loaded on its base model. Missing paths give a ValueError."""
    from divrl.models import load_model_and_tokenizer, resolve_model_name
    from divrl.trainers.checkpoint import damaged_weight_files

    path = Path(name_or_path).expanduser()
    if path.is_dir() and (damaged := damaged_weight_files(str(path))):
        raise ValueError(f"model {name_or_path!r}: {', '.join(damaged)} (a copy or save cut short?)")
    adapter = adapter_config(path)
    if adapter is not None:
        from peft import PeftModel
        from transformers import AutoTokenizer

        model, tokenizer = load_model_and_tokenizer(adapter["base_model_name_or_path"], quantize=quantize, dtype=dtype)
        from divrl.quiet import upstream_deprecations_silenced

        with upstream_deprecations_silenced():
            model = PeftModel.from_pretrained(model, str(path))
        if (path / "tokenizer_config.json").is_file():
            tokenizer = AutoTokenizer.from_pretrained(path)
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
    else:
        resolve_model_name(name_or_path)  # a missing local path fails here, before torch is imported
        model, tokenizer = load_model_and_tokenizer(name_or_path, quantize=quantize, dtype=dtype)
    model.eval()
    return model, tokenizer


class TransformersSampler:
    """Sampling with `model.generate` (do_sample, num_return_sequences), left-padded batches.

    On the CPU, `cpu_fast` (default True) patches the model's decoding as divrl's trainers do (same sampling
    distribution): each prompt's KV cache is computed once and shared by its n samples, the LM head uses the
    faster few-row layout, and tokens are drawn by CDF inversion. False keeps transformers' own loop."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: SamplingConfig, cpu_fast: bool = True
    ) -> None:

        if cpu_fast and model.device.type == "cpu":
            from divrl.backends.cpu import add_decode_lm_head, add_decode_sampler

            causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
            add_decode_lm_head(causal_lm)
            add_decode_sampler(causal_lm)
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        self.reseed(config.seed)

    def reseed(self, seed: int) -> None:
        """Restart the random stream of the draws that follow (torch's global generator, which generate uses)."""
        import torch

        torch.manual_seed(seed)

    def _input_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer(prompt)["input_ids"]
        if not self.has_chat_template:
            raise ValueError("chat prompts need a tokenizer with a chat template; use plain-text (base) prompts")
        text = self.tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def __call__(self, prompts: Sequence[Prompt], n: int = 1) -> list[list[str]]:
        import torch
        from tqdm.auto import tqdm

        _check_n(prompts, n)
        config = self.config
        encoded = [self._input_ids(p) for p in prompts]
        outputs: list[list[str]] = [[] for _ in prompts]
        greedy = config.temperature == 0  # one greedy decode per prompt, repeated n times
        sampling = dict(do_sample=True, temperature=config.temperature, top_p=config.top_p, top_k=config.top_k)
        if greedy:
            sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        if config.stop:
            from transformers import StoppingCriteriaList

            from divrl.backends.stop_strings import StopStringCriterion
        groups = _generation_groups(len(prompts), 1 if greedy else n, config.batch_size)
        bar = None if config.progress else True  # None: tqdm shows no bar where stderr is not a terminal (a log file)
        for indices, count in tqdm(groups, desc="sampling", disable=bar, leave=False):
            batch = self.tokenizer.pad({"input_ids": [encoded[i] for i in indices]}, return_tensors="pt")
            batch = {k: v.to(self.model.device) for k, v in batch.items()}
            with torch.no_grad():
                generated = self.model.generate(
                    **batch,
                    max_new_tokens=config.max_new_tokens,
                    num_return_sequences=count,
                    pad_token_id=self.tokenizer.pad_token_id,
                    **sampling,
                    **({"stopping_criteria": StoppingCriteriaList([StopStringCriterion(self.tokenizer, config.stop)])}
                       if config.stop else {}),
                )
            texts = self.tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
            for j, i in enumerate(indices):
                outputs[i].extend(truncate_at_stop(t, config.stop) for t in texts[j * count : (j + 1) * count])
        return [o * n for o in outputs] if greedy else outputs


class VLLMSampler:
    """Sampling with vLLM (`LLM.generate` for text prompts, `LLM.chat` for message lists).

    A PEFT LoRA adapter directory runs on its base model (adapter_config.json's base_model_name_or_path) with
    `enable_lora=True` and a `LoRARequest` on every call. `dtype` goes to vLLM as is (one of VLLM_DTYPES);
    `quantize` must be "auto" or "none": both load the checkpoint's own weights, since on-the-fly 4-bit NF4
    (bitsandbytes) is a transformers-backend feature here and is refused rather than silently dropped.
    """

    def __init__(
        self,
        name_or_path: str,
        config: SamplingConfig,
        *,
        quantize: str = "auto",
        dtype: str = "auto",
        **llm_kwargs: Any,
    ) -> None:
        if quantize not in ("auto", "none"):
            raise ValueError(
                f"quantize {quantize!r} is not supported by the vllm backend (it loads the checkpoint's own weights); "
                "use quantize 'none' or 'auto', or the transformers backend for 4-bit NF4"
            )
        if dtype not in VLLM_DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one vLLM accepts; choose one of {VLLM_DTYPES}")
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ValueError("backend 'vllm' needs the vllm package (pip install vllm) and a GPU") from exc
        from divrl.models import resolve_model_name

        self.config = config
        self.request_seed: int | None = None  # per-request seed from `reseed`; None: the engine's own stream
        self.lora_request = None
        path = Path(name_or_path).expanduser()
        adapter = adapter_config(path)
        if adapter is not None:
            from vllm.lora.request import LoRARequest

            rank = adapter.get("r")
            if isinstance(rank, int) and not isinstance(rank, bool):
                if rank > VLLM_LORA_RANKS[-1]:
                    raise ValueError(
                        f"adapter {path} has LoRA rank {rank}; vLLM serves ranks up to {VLLM_LORA_RANKS[-1]}"
                    )
                llm_kwargs.setdefault("max_lora_rank", next(r for r in VLLM_LORA_RANKS if r >= rank))
            llm_kwargs["enable_lora"] = True
            if (path / "tokenizer_config.json").is_file():
                llm_kwargs.setdefault("tokenizer", str(path))
            self.lora_request = LoRARequest(path.name or "adapter", 1, str(path))
            name_or_path = adapter["base_model_name_or_path"]
        self.llm = LLM(model=resolve_model_name(name_or_path), seed=config.seed, dtype=dtype, **llm_kwargs)
        self.has_chat_template = bool(getattr(self.llm.get_tokenizer(), "chat_template", None))

    def reseed(self, seed: int) -> None:
        """Seed the requests that follow (vLLM's per-request seed)."""
        self.request_seed = seed

    def __call__(self, prompts: Sequence[Prompt], n: int = 1) -> list[list[str]]:
        from vllm import SamplingParams

        _check_n(prompts, n)
        config = self.config
        params = SamplingParams(
            n=n,
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k or -1,
            max_tokens=config.max_new_tokens,
            stop=list(config.stop) or None,
            seed=self.request_seed,
        )
        outputs: list[list[str]] = [[] for _ in prompts]
        text_idx = [i for i, p in enumerate(prompts) if isinstance(p, str)]
        chat_idx = [i for i, p in enumerate(prompts) if not isinstance(p, str)]
        for indices, call in ((text_idx, self.llm.generate), (chat_idx, self.llm.chat)):
            if indices:
                results = call(
                    [prompts[i] for i in indices], params, use_tqdm=config.progress, lora_request=self.lora_request
                )
                for i, result in zip(indices, results, strict=True):
                    outputs[i] = [o.text for o in result.outputs]
        return outputs


def make_sampler(
    name_or_path: str,
    config: SamplingConfig,
    *,
    backend: str = "transformers",
    quantize: str = "auto",
    dtype: str = "auto",
) -> Sampler:
    """A sampler for model `name_or_path` on `backend` ("transformers", or "vllm" when installed)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sampling backend {backend!r}; choose one of {BACKENDS}")
    if backend == "vllm":
        return VLLMSampler(name_or_path, config, quantize=quantize, dtype=dtype)
    model, tokenizer = load_for_sampling(name_or_path, quantize=quantize, dtype=dtype)
    return TransformersSampler(model, tokenizer, config)
