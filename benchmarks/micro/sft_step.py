"""`divrl sft` step time on the CPU with TRL's fused LM head scoring every position vs only the labelled ones.

The voxel SFT recipe on the embedded Gemma-3-270M (zero-shot prompts, about 4-5x as many prompt tokens as answer
tokens): one training step (forward, backward, optimizer) on the same batch, alternating the two arms for
`--rounds` rounds after one warm-up step each; the ratio is the geometric mean of the per-round ratios with a
95% bootstrap interval (`timing.geometric_ratio`). Writes benchmarks/results/sft_step.{json,md}.
Run: `HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/micro/sft_step.py`.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402
from timing import geometric_ratio  # noqa: E402

RESULTS = BENCHMARKS / "results"
RECIPE = BENCHMARKS.parent / "recipes" / "sft" / "hypospace-voxel.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8, help="rows per step (the recipe's 8)")
    parser.add_argument("--model", default="embedded:gemma-3-270m")
    args = parser.parse_args()

    import torch

    from divrl.sft import build_trainer, labelled_positions_only, parse_recipe

    out = Path(os.environ.get("TMPDIR", "/tmp")) / "divrl-sft-step"
    script, sft_args, model_args = parse_recipe(["--config", str(RECIPE), "--model_name_or_path", args.model,
                                                 "--output_dir", str(out),
                                                 "--per_device_train_batch_size", str(args.batch)])
    trainer = build_trainer(script, sft_args, model_args)
    trainer.create_optimizer_and_scheduler(num_training_steps=10)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which this benchmark bypasses
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"][:, 1:]
    arms = {"every position (TRL off Triton)": contextlib.nullcontext,
            "labelled positions only": labelled_positions_only}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for round_index in range(args.rounds + 1):
        for name, context in arms.items():
            start = time.perf_counter()
            with context():
                trainer.training_step(trainer.model, dict(batch))
            trainer.optimizer.zero_grad()
            if round_index:  # the first round warms up
                times[name].append(time.perf_counter() - start)
            print(f"round {round_index}: {name} {time.perf_counter() - start:.1f} s", flush=True)
    full, compact = (times[name] for name in arms)
    ratio, low, high = geometric_ratio([c / f for c, f in zip(compact, full, strict=True)])
    result = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "cpu": cpu_model(),
              "cores": os.cpu_count(), "load_average": [round(x, 1) for x in os.getloadavg()],
              "rows": args.batch, "sequence_positions": labels.numel(),
              "labelled_positions": int((labels != -100).sum()),
              "seconds": times, "ratio": ratio, "ci95": [low, high], "threads": torch.get_num_threads()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sft_step.json").write_text(json.dumps(result, indent=1))
    text = "\n".join([
        "## `divrl sft` step time on the CPU (`benchmarks/micro/sft_step.py`)", "",
        f"Voxel SFT recipe, {args.model}, {args.batch} rows per step: {result['labelled_positions']} of "
        f"{result['sequence_positions']} positions carry a label. One step (forward, backward, optimizer) on the same "
        f"batch, arms alternated, {args.rounds} rounds after a warm-up; {result['cpu']}, {result['cores']} cores, "
        f"load average {result['load_average']} at the end (other work shared the machine: compare the ratio, not "
        f"the seconds), {result['date']}.", "",
        "| LM head scores | seconds per step (rounds) |", "|---|---|",
        *[f"| {name} | {', '.join(f'{t:.1f}' for t in values)} |" for name, values in times.items()], "",
        f"Labelled-only / every position: **{ratio:.2f}** (95% CI {low:.2f}-{high:.2f}).", ""])
    (RESULTS / "sft_step.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
