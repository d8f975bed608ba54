"""Step time of a real model shape on the device at hand (`benchmarks/micro/gpu_step.py`): where a GRPO step's seconds
go (generation, scoring, training), completion tokens per second and peak memory, per generation path and method.

A random model of a named real shape (Qwen3-4B's or Gemma-3-4B's transformer blocks) is built offline with a local
512-token tokenizer (the LM head is then far smaller than the real one's: say so when comparing with a real model).
Generation paths: transformers `generate` in bf16, in 4-bit NF4 (bitsandbytes, CUDA only), TRL's continuous
batching (`use_transformers_continuous_batching`, formerly `use_transformers_paged`) and a static KV cache
(`cache_implementation: static`). A path that fails is reported with its reason; the fastest that ran is recommended.
Phases are wall-clock seconds around the trainer's own methods (`cpu_step.timed_step`); on CUDA they are not
synchronised, so work queued in one phase can be counted in the next, while the step total is exact.

    python benchmarks/micro/gpu_step.py                     # on a GPU: Qwen3-4B's shape, 32 completions, <= 256 tokens
    python benchmarks/micro/gpu_step.py --reduced --steps 1 # the CPU form CI runs: a 2-layer model of the same family

Results: benchmarks/results/gpu_step[_reduced].{json,md}, naming the hardware every number was measured on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cpu_step import timed_step

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
# Transformer-block shapes of the real models (their published configs); the vocabulary is the local tokenizer's.
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-4b": {"model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "tie_word_embeddings": True},
    "gemma-3-4b": {"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240,
                   "num_hidden_layers": 34, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                   "sliding_window": 1024, "tie_word_embeddings": True},
}
REDUCED = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "head_dim": 64}
PATHS = ("bf16", "nf4", "continuous-batching", "static-cache")
VOCAB = 512


def build_model(shape: str, reduced: bool, folder: Path) -> Path:
    """A random model of `shape` (or its 2-layer reduced form) with the local tokenizer, saved like a checkpoint."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from divrl.testing import build_tokenizer

    tokenizer_dir = build_tokenizer(folder / "tokenizer", vocab_size=VOCAB)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    settings = {**SHAPES[shape], **(REDUCED if reduced else {})}
    config = AutoConfig.for_model(**settings, vocab_size=len(tokenizer), max_position_embeddings=4096,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                                  bos_token_id=tokenizer.bos_token_id)
    model = AutoModelForCausalLM.from_config(config)
    out = folder / shape
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def path_settings(path: str, cuda: bool) -> tuple[str, dict[str, Any]]:
    """(quantize, extra DivRLConfig fields) of a generation path; ValueError where it cannot run on this device."""
    if path == "nf4" and not cuda:
        raise ValueError("4-bit NF4 needs CUDA (bitsandbytes' CPU path is not a training path)")
    extra = {"bf16": cuda}
    if path == "continuous-batching":
        extra["use_transformers_continuous_batching"] = True
    if path == "static-cache":
        extra["cache_implementation"] = "static"
    return ("4bit" if path == "nf4" else "none"), extra


def run_arm(model_dir: Path, path: str, method: dict[str, Any], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Warm-up step, then `args.steps` timed steps of one (path, method); per-phase medians, tokens/s, peak memory."""
    import torch
    from datasets import Dataset

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.models import default_lora_config, load_model_and_tokenizer
    from divrl.testing import ToyTask

    cuda = torch.cuda.is_available()
    quantize, extra = path_settings(path, cuda)
    model, tokenizer = load_model_and_tokenizer(str(model_dir), quantize=quantize,
                                                dtype="bfloat16" if cuda else "float32", cpu=not cuda,
                                                log=lambda message: None)
    config = DivRLConfig(output_dir=str(out), use_cpu=not cuda, per_device_train_batch_size=args.completions,
                         num_generations=args.group, max_completion_length=args.max_tokens, max_steps=1,
                         learning_rate=1e-5, logging_strategy="no", save_strategy="no", report_to=[],
                         disable_tqdm=True, seed=0, **extra, **method)
    prompts = [f"prompt {i}: the quick brown fox jumps over the lazy dog" for i in range(args.completions)]
    trainer = DivRLTrainer(model, args=config, train_dataset=Dataset.from_dict({"prompt": prompts}),
                           processing_class=tokenizer, peft_config=default_lora_config(), task=ToyTask())
    steps = []
    for index in range(args.steps + 1):
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        timed = timed_step(trainer)
        phases = {**timed["wall"], "completion_tokens": timed["completion_tokens"]}
        if index:  # the first step warms up kernels and caches
            steps.append(phases)
    result = {phase: statistics.median(s[phase] for s in steps) for phase in steps[0]}
    result["training"] = result["loss_forward"] + result["backward"] + result["other"]
    result["tokens_per_second"] = (result["completion_tokens"] * args.completions / result["generation"]
                                   if result["generation"] > 0 else None)
    result["peak_memory_gib"] = (torch.cuda.max_memory_allocated() / 2**30 if cuda
                                 else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    result["dtype"] = "bf16" if cuda else "fp32"  # the CPU runs the unquantised paths in fp32
    result["peak_memory_kind"] = "CUDA allocated" if cuda else "process RSS (whole run so far)"
    return result


def hardware() -> dict[str, Any]:
    """What the numbers were measured on."""
    import torch

    if torch.cuda.is_available():
        device = f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda})"
    else:
        device = f"CPU {cpu_model()}, {torch.get_num_threads()} torch threads"
    return {"device": device, "torch": torch.__version__, "date": datetime.date.today().isoformat()}


def markdown(result: dict[str, Any]) -> str:
    """The results fragment: one row per (path, method), the recommendation, the hardware."""
    s = result["settings"]
    lines = [f"## GPU step benchmark (`benchmarks/micro/gpu_step.py`{' --reduced' if s['reduced'] else ''})", "",
             f"Model: random {s['shape']}{' (reduced: 2 layers, hidden 256)' if s['reduced'] else ''} shape with a "
             f"{VOCAB}-token vocabulary; {s['completions']} completions (groups of {s['group']}) of at most "
             f"{s['max_tokens']} tokens per step, LoRA r=16; median of {s['steps']} timed step(s) after a warm-up. "
             f"Measured on: **{result['hardware']['device']}**, torch {result['hardware']['torch']}, "
             f"{result['hardware']['date']}.", "",
             "| path (dtype) | method | generation s | scoring s | training s | total s | tokens/s | peak memory "
             "GiB |",
             "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"| {row['path']} | {row['method']} | did not run: {row['error']} | | | | | |")
            continue
        tps = "-" if row["tokens_per_second"] is None else f"{row['tokens_per_second']:.0f}"
        lines.append(f"| {row['path']} ({row['dtype']}) | {row['method']} | {row['generation']:.2f} | "
                     f"{row['scoring']:.2f} | {row['training']:.2f} | {row['total']:.2f} | {tps} | "
                     f"{row['peak_memory_gib']:.2f} |")
    kinds = {row["peak_memory_kind"] for row in result["rows"] if "peak_memory_kind" in row}
    if "CUDA allocated" not in kinds:
        lines += ["", "Peak memory on the CPU is the process's peak resident set so far, so a row carries the peaks of "
                      "the rows before it (read it as an upper bound)."]
    lines += ["", f"Recommended generation path here: **{result['recommended']}** (the lowest median step time of "
                  "plain GRPO among the paths that ran)." if result["recommended"] else
              "No generation path ran."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    parser.add_argument("--reduced", action="store_true", help="2-layer model of the family (the CPU form)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--methods", nargs="+", default=["grpo", "ips"], help="grpo and/or divrl method presets")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per arm, after one warm-up step")
    parser.add_argument("--completions", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from divrl.methods import presets_of

    methods = {name: {} if name == "grpo" else presets_of(name) for name in args.methods}
    rows = []
    with tempfile.TemporaryDirectory(prefix="divrl-gpu-step-") as folder:
        model_dir = build_model(args.shape, args.reduced, Path(folder))
        for path in args.paths:
            for name, method in methods.items():
                started = time.perf_counter()
                try:
                    row = run_arm(model_dir, path, method, args, Path(folder) / f"{path}-{name}")
                except Exception as exc:  # a path that cannot run here is a finding, not a crash
                    row = {"error": " ".join(f"{type(exc).__name__}: {exc}".split())[:200]}
                rows.append({"path": path, "method": name, **row})
                print(f"{path} / {name}: {row} ({time.perf_counter() - started:.0f} s)", flush=True)
    ran = [r for r in rows if "error" not in r and r["method"] == "grpo"]
    result = {"settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "hardware": hardware(), "rows": rows,
              "recommended": min(ran, key=lambda r: r["total"])["path"] if ran else None}
    name = "gpu_step_reduced" if args.reduced else "gpu_step"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{name}.md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
