"""Seconds to sample a recovery evaluation of the embedded Gemma-3-270M on the CPU: transformers' loop vs divrl's.

The evaluation `benchmarks/hypospace_recovery.py` runs (`divrl eval recovery`): HypoSpace Boolean (x, y; AND/OR;
depth 2), the held-out test split (18 of the 36 instances; the recipe's limit of 78 keeps all), 3-shot base prompts,
N samples per instance of at most T tokens, stopping at the END line, 16 sequences per generate call. Two arms
sample from two copies of the same model with `divrl.sampling.TransformersSampler`:
- `before`: `cpu_fast=False`, transformers' own sampling loop, every sample prefills its prompt (today's path);
- `divrl`: `cpu_fast=True`, each prompt's KV cache computed once and shared by its N samples, the few-row LM head
  and CDF-inversion sampling (the same sampling distribution).
The arms alternate per instance (same machine load); wall and process-CPU seconds are summed over instances.
Writes benchmarks/results/eval_time.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
ARMS = ("before", "divrl")
TASK_ARGS = {"operators": "basic", "max_depth": 2}  # hypospace_recovery.py's Boolean setting
INSTANCE_LIMIT = 78


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    """The `## ` fragment for BENCHMARKS.md."""
    s, wall, cpu = result["settings"], result["wall"], result["cpu"]
    machine = result["machine"]
    text = f"""## Recovery evaluation sampling time (`benchmarks/micro/eval_time.py`)

`{s["model"]}` on the CPU, the recovery benchmark's evaluation: HypoSpace Boolean ({s["instances"]} held-out
instances), {s["samples"]} samples per instance of at most {s["max_new_tokens"]} tokens, stop at END, 3-shot base
prompts, {s["batch_size"]} sequences per generate call. `before`: transformers' sampling loop (every sample
prefills its prompt); `divrl`: `TransformersSampler`'s CPU path (one prefill per prompt shared by its samples, the
few-row LM head, CDF-inversion sampling; same distribution). Arms alternate per instance.

| arm | wall seconds | process CPU seconds | mean completion characters |
|---|---|---|---|
| before | {wall["before"]:.1f} | {cpu["before"]:.1f} | {result["characters"]["before"]:.1f} |
| divrl | {wall["divrl"]:.1f} | {cpu["divrl"]:.1f} | {result["characters"]["divrl"]:.1f} |

divrl / before: {wall["divrl"] / wall["before"]:.2f} of the wall time ({wall["before"] / wall["divrl"]:.2f}x faster),
{cpu["divrl"] / cpu["before"]:.2f} of the CPU time.

Machine: {machine["nproc"]} cores ({machine["cpu"]}), torch {machine["torch"]}, {machine["threads"]} torch threads;
{result["date"]}; 1-minute load average {machine["load_before"]:.1f} before, {machine["load_after"]:.1f} after.
"""
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:gemma-3-270m")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--instances", type=int, default=None, help="first K test instances (default: all)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()

    import torch

    from divrl.sampling import SamplingConfig, TransformersSampler, load_for_sampling
    from divrl.tasks.hypospace import make_task
    from divrl.tasks.hypospace.common import END_MARKER

    load_before = os.getloadavg()[0]
    task = make_task("boolean", **TASK_ARGS)
    instances = task.split("test", 0, 0.5, INSTANCE_LIMIT)[: args.instances]
    build = task.prompts_for("base", 0, 0.5, INSTANCE_LIMIT, 3)
    config = SamplingConfig(max_new_tokens=args.max_new_tokens, batch_size=16, stop=(f"\n{END_MARKER}",))
    samplers = {}
    for arm in ARMS:
        model, tokenizer = load_for_sampling(args.model, quantize="none", dtype="float32")
        samplers[arm] = TransformersSampler(model, tokenizer, config, cpu_fast=arm == "divrl")
    wall = dict.fromkeys(ARMS, 0.0)
    cpu = dict.fromkeys(ARMS, 0.0)
    characters: dict[str, list[int]] = {arm: [] for arm in ARMS}
    for index, instance in enumerate(instances):
        prompt = build(instance)
        for arm in ARMS if index % 2 == 0 else ARMS[::-1]:
            torch.manual_seed(index)
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            completions = samplers[arm]([prompt], args.samples)[0]
            wall[arm] += time.perf_counter() - start_wall
            cpu[arm] += time.process_time() - start_cpu
            characters[arm] += [len(c) for c in completions]
        print(f"instance {index + 1}/{len(instances)}: " + ", ".join(f"{a} {wall[a]:.1f} s" for a in ARMS), flush=True)
    result = {
        "settings": {"model": args.model, "instances": len(instances), "samples": args.samples,
                     "max_new_tokens": args.max_new_tokens, "batch_size": config.batch_size, **TASK_ARGS},
        "wall": wall,
        "cpu": cpu,
        "characters": {arm: sum(v) / len(v) for arm, v in characters.items()},
        "machine": {"nproc": os.cpu_count(), "cpu": cpu_model(), "torch": torch.__version__,
                    "threads": torch.get_num_threads(), "load_before": load_before, "load_after": os.getloadavg()[0]},
        "date": datetime.date.today().isoformat(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_time.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(out / "eval_time.md", result)
    ratio = wall["divrl"] / wall["before"]
    print(f"wall: before {wall['before']:.1f} s, divrl {wall['divrl']:.1f} s, ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
