"""Seconds per GRPO step of the embedded Gemma-3-270M on the CPU: vanilla TRL next to divrl's CPU path.

Both arms train the same model (LoRA r=16 on all linear projections, float32, no gradient checkpointing) on
HypoSpace causal prompts (3-shot base prompts), G completions of exactly L tokens per step (min_new_tokens = L
in both arms, so every step does the same work), one optimizer step per generation. The arms alternate
within each round so they see the same machine load; a step's time is split into generation (sampling and
decoding), scoring (rewards and any extra log-prob passes), the loss forward, the backward and the rest
(optimizer). Wall and process-CPU seconds are both recorded. Writes benchmarks/results/cpu_step.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine import cpu_model

RESULTS = Path(__file__).parent / "results"
PHASES = ("generation", "scoring", "loss_forward", "backward", "other")
ARMS = ("vanilla", "divrl")



class PhaseTimer:
    """Wall and CPU seconds spent in wrapped methods of one trainer, per phase, over one step."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall
                self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - cpu

        return timed

    def step(self, wall: float, cpu: float) -> dict[str, dict[str, float]]:
        """The step's phases; scoring excludes generation, `other` is the step time not in any phase."""
        out = {}
        for kind, total, spent in (("wall", wall, self.wall), ("cpu", cpu, self.cpu)):
            phases = {
                "generation": spent.get("generation", 0.0),
                "scoring": spent.get("generate_and_score", 0.0) - spent.get("generation", 0.0),
                "loss_forward": spent.get("loss_forward", 0.0),
                "backward": spent.get("backward", 0.0),
            }
            phases["other"] = total - sum(phases.values())
            phases["total"] = total
            out[kind] = phases
        self.wall, self.cpu = {}, {}
        return out


def build_trainer(arm: str, args: argparse.Namespace, dataset: Any, reward_funcs: list, out_dir: str) -> Any:
    """A trainer of `arm` with its own copy of the model; both arms share every training setting."""
    from trl import GRPOConfig, GRPOTrainer

    from divrl.models import default_lora_config, load_model_and_tokenizer
    from divrl.trainers.cpu_fast import CPUFastLogpsMixin

    model, tokenizer = load_model_and_tokenizer(args.model, quantize="none", dtype="float32")
    trainer_class = GRPOTrainer if arm == "vanilla" else type("DivRLCPUTrainer", (CPUFastLogpsMixin, GRPOTrainer), {})
    config = GRPOConfig(
        output_dir=os.path.join(out_dir, arm),
        per_device_train_batch_size=args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.completion_length,
        generation_kwargs={"min_new_tokens": args.completion_length},
        gradient_checkpointing=False,
        bf16=False,
        use_cpu=True,
        max_steps=1,
        learning_rate=1e-5,
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=args.seed,
    )
    return trainer_class(
        model=model,
        args=config,
        reward_funcs=reward_funcs,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=default_lora_config(),
    )


def timed_step(trainer: Any) -> dict[str, dict[str, float]]:
    """Run one training step (generation, scoring, loss, backward, optimizer) and return its phase times."""
    from transformers import TrainerCallback

    timer = PhaseTimer()
    clocks: dict[str, tuple[float, float]] = {}

    class StepClock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            clocks["begin"] = (time.perf_counter(), time.process_time())

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            clocks["end"] = (time.perf_counter(), time.process_time())

    wrapped = {
        "_generate": "generation",
        "_generate_and_score_completions": "generate_and_score",
        "compute_loss": "loss_forward",
    }
    for attribute, phase in wrapped.items():
        setattr(trainer, attribute, timer.wrap(phase, getattr(trainer, attribute)))
    trainer.accelerator.backward = timer.wrap("backward", trainer.accelerator.backward)
    callback = StepClock()
    trainer.add_callback(callback)
    try:
        trainer.train()
    finally:
        trainer.remove_callback(callback)
        for attribute in wrapped:
            delattr(trainer, attribute)
        del trainer.accelerator.backward
    (wall_begin, cpu_begin), (wall_end, cpu_end) = clocks["begin"], clocks["end"]
    return timer.step(wall_end - wall_begin, cpu_end - cpu_begin)


def warm_up(trainer: Any, tokens: int = 32) -> None:
    """One short forward pass, so the first timed step does not pay for touching the weights."""
    import torch

    with torch.no_grad():
        trainer.model(input_ids=torch.ones(1, tokens, dtype=torch.long))


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm and phase the median and the best (minimum) over rounds; the same-round speedups of the step
    (vanilla / divrl) and the speedup of the best steps, the estimate least inflated by other jobs' load."""
    summary: dict[str, Any] = {}
    for kind in ("wall", "cpu"):
        phases = (*PHASES, "total")
        seconds = {arm: {p: [r[arm][kind][p] for r in rounds] for p in phases} for arm in ARMS}
        speedups = [r["vanilla"][kind]["total"] / r["divrl"][kind]["total"] for r in rounds]
        summary[kind] = {
            "median_seconds": {arm: {p: statistics.median(v) for p, v in seconds[arm].items()} for arm in ARMS},
            "best_seconds": {arm: {p: min(v) for p, v in seconds[arm].items()} for arm in ARMS},
            "speedup_per_round": speedups,
            "median_speedup": statistics.median(speedups),
            "best_speedup": min(seconds["vanilla"]["total"]) / min(seconds["divrl"]["total"]),
        }
    return summary


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    """The `## ` fragment for BENCHMARKS.md: best and median seconds per phase, the speedups and the machine."""
    settings, wall, cpu = result["settings"], result["summary"]["wall"], result["summary"]["cpu"]
    rows = []
    for phase in (*PHASES, "total"):
        cells = [f"{wall[stat][arm][phase]:.1f}" for stat in ("best_seconds", "median_seconds") for arm in ARMS]
        rows.append(f"| {phase.replace('_', ' ')} | " + " | ".join(cells) + " |")
    rounds = ", ".join(f"{s:.2f}x" for s in wall["speedup_per_round"])
    machine = result["machine"]
    text = f"""## CPU step time of the embedded model (`benchmarks/cpu_step.py`)

One GRPO step of `{settings["model"]}` on the CPU: G={settings["num_generations"]} completions of exactly
{settings["completion_length"]} tokens, HypoSpace causal 3-shot base prompt of {settings["prompt_tokens"]} tokens,
LoRA r=16 on all linear projections, float32, no gradient checkpointing. `vanilla` is `trl.GRPOTrainer`
{settings["trl_version"]}; `divrl` adds `CPUFastLogpsMixin` (same loss and sampling distribution; see
`src/divrl/trainers/cpu_fast.py`). {settings["rounds"]} rounds, the two arms alternating within each round;
wall-clock seconds, best (minimum) and median over rounds.

| phase | vanilla best | divrl best | vanilla median | divrl median |
|---|---|---|---|---|
{chr(10).join(rows)}

Speedup of the whole step (vanilla / divrl): {wall["best_speedup"]:.2f}x between the best steps; per round
{rounds} (median {wall["median_speedup"]:.2f}x); process CPU time {cpu["best_speedup"]:.2f}x between the best steps.

Machine: {machine["nproc"]} cores ({machine["cpu"]}), torch {machine["torch"]}, {machine["threads"]} torch threads;
{result["date"]}. The host was shared with other jobs (1-minute load average {machine["load_before"]:.1f} before,
{machine["load_after"]:.1f} after the run): rounds that met heavy load are slower in both arms, generation most
(many small operations, each waiting for both threads); the best steps are the closest to an idle machine.
"""
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:gemma-3-270m")
    parser.add_argument("--rounds", type=int, default=2, help="timed steps per arm (arms alternate)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--completion-length", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.rounds < 1 or args.num_generations < 2 or args.completion_length < 1:
        parser.error("--rounds >= 1, --num-generations >= 2 and --completion-length >= 1 are required")

    import torch
    import trl
    from transformers import AutoTokenizer

    from divrl.models import resolve_model_name
    from divrl.tasks.hypospace import make_task

    load_before = os.getloadavg()[0]
    task = make_task("causal")
    dataset = task.train_dataset(style="base", n_exemplars=3)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(args.model))
    prompt_tokens = len(tokenizer(dataset[0]["prompt"])["input_ids"])
    with tempfile.TemporaryDirectory() as out_dir:
        trainers = {arm: build_trainer(arm, args, dataset, task.reward_funcs(), out_dir) for arm in ARMS}
        for trainer in trainers.values():
            warm_up(trainer)
        rounds = []
        for index in range(args.rounds):
            order = ARMS if index % 2 == 0 else ARMS[::-1]
            record = {arm: timed_step(trainers[arm]) for arm in order}
            rounds.append(record)
            print(
                f"round {index + 1}/{args.rounds}: "
                + ", ".join(f"{arm} {record[arm]['wall']['total']:.1f} s" for arm in ARMS),
                flush=True,
            )
    result = {
        "settings": {
            "model": args.model,
            "rounds": args.rounds,
            "num_generations": args.num_generations,
            "completion_length": args.completion_length,
            "prompt_tokens": prompt_tokens,
            "trl_version": trl.__version__,
        },
        "rounds": rounds,
        "summary": summarise(rounds),
        "machine": {
            "nproc": os.cpu_count(),
            "cpu": cpu_model(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
        },
        "date": datetime.date.today().isoformat(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_step.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(out / "cpu_step.md", result)
    for kind in ("wall", "cpu"):
        summary = result["summary"][kind]
        print(
            f"{kind}: best vanilla {summary['best_seconds']['vanilla']['total']:.1f} s, "
            f"divrl {summary['best_seconds']['divrl']['total']:.1f} s, speedup {summary['best_speedup']:.2f}x; "
            f"median same-round speedup {summary['median_speedup']:.2f}x"
        )


if __name__ == "__main__":
    main()
