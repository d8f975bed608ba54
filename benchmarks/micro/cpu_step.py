"""Seconds per GRPO step of the embedded Gemma-3-270M on the CPU: vanilla TRL, divrl's earlier CPU path, divrl now.

Every arm trains the same model (LoRA r=16 on all linear projections, float32, no gradient checkpointing) on the
Boolean CPU recipe's data (HypoSpace Boolean, extended operators, depth 2, 3-shot base prompts, format reward
0.2), G completions of at most L tokens per step, one optimizer step per generation:
- `vanilla`: `trl.GRPOTrainer`; completions run to L or EOS (the base model runs on past the answer);
- `before`: divrl's CPU path as it was before completions stopped at END (the CPU kernels of a `DivRLTrainer` without a
  task, so without stop strings, the shared-prompt loss forward and the shared prefill switched off, LoRA dropout 0.05
  as the CPU recipes had; until issue 30 this arm was the kernels' mixin on a bare GRPOTrainer, without divrl's
  per-step metrics);
- `divrl`: `DivRLTrainer` as the CPU recipe runs it now: stop at the END line, each group's prompt computed once in
  the loss forward and in the prefill (LoRA dropout 0, which that sharing needs to stay exact).
The arms alternate within each round so they see the same machine load; a step's time is split into generation
(sampling and decoding), scoring (rewards and any extra log-prob passes), the loss forward, the backward and the
rest (optimizer). Wall and process-CPU seconds and each step's mean completion length are recorded. Writes
benchmarks/results/cpu_step.json and .md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
PHASES = ("generation", "scoring", "loss_forward", "backward", "other")
ARMS = ("vanilla", "before", "divrl")
# The Boolean CPU recipe's task (recipes/embedded-cpu/hypospace-boolean).
TASK_ARGS = {"operators": "extended", "max_depth": 2, "format_reward": 0.2}



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


def build_trainer(arm: str, args: argparse.Namespace, task: Any, dataset: Any, out_dir: str) -> Any:
    """A trainer of `arm` with its own copy of the model; every arm shares every other training setting."""
    from trl import GRPOConfig, GRPOTrainer

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.models import default_lora_config, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(args.model, quantize="none", dtype="float32")
    settings = dict(
        output_dir=os.path.join(out_dir, arm),
        per_device_train_batch_size=args.num_generations,
        num_generations=args.num_generations,
        max_completion_length=args.completion_length,
        activation_checkpointing=False,
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
    common = dict(model=model, reward_funcs=task.reward_funcs(), train_dataset=dataset, processing_class=tokenizer)
    if arm == "divrl":
        return DivRLTrainer(args=DivRLConfig(**settings), task=task, peft_config=default_lora_config(lora_dropout=0.0),
                            **common)
    if arm == "vanilla":
        return GRPOTrainer(args=GRPOConfig(**settings), peft_config=default_lora_config(), **common)
    # before: divrl's CPU kernels without a task (no stop strings), the prompt sharing off (`arm_code`)
    return DivRLTrainer(args=DivRLConfig(**settings), peft_config=default_lora_config(), **common)


@contextlib.contextmanager
def arm_code(arm: str) -> Iterator[None]:
    """The `before` arm runs divrl's CPU path with the prompt sharing of the loss forward and the prefill off."""
    from divrl.backends import cpu as cpu_fast

    if arm != "before":
        yield
        return
    saved = cpu_fast.shared_prompt_hidden_states, cpu_fast._prefill_distinct_rows
    cpu_fast.shared_prompt_hidden_states = lambda *args, **kwargs: None
    cpu_fast._prefill_distinct_rows = lambda model, ids, config, kwargs: model._prefill(ids, config, kwargs)
    try:
        yield
    finally:
        cpu_fast.shared_prompt_hidden_states, cpu_fast._prefill_distinct_rows = saved


def timed_step(trainer: Any) -> dict[str, dict[str, float]]:
    """Run one training step (generation, scoring, loss, backward, optimizer) and return its phase times."""
    from transformers import TrainerCallback

    timer = PhaseTimer()
    clocks: dict[str, tuple[float, float]] = {}
    lengths: dict[str, float] = {}

    class StepClock(TrainerCallback):
        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            clocks["begin"] = (time.perf_counter(), time.process_time())

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            clocks["end"] = (time.perf_counter(), time.process_time())
            lengths["completion_tokens"] = trainer._metrics["train"]["completions/mean_length"][-1]  # before logging

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
    phases = timer.step(wall_end - wall_begin, cpu_end - cpu_begin)
    phases["completion_tokens"] = lengths["completion_tokens"]
    return phases


def warm_up(trainer: Any, tokens: int = 32) -> None:
    """One short forward pass, so the first timed step does not pay for touching the weights."""
    import torch

    with torch.no_grad():
        trainer.model(input_ids=torch.ones(1, tokens, dtype=torch.long))


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per arm and phase the median and the best (minimum) over rounds; each other arm's time over divrl's, per
    round (same load) and between the best steps (the estimate least inflated by other jobs' load)."""
    summary: dict[str, Any] = {}
    arms = list(rounds[0])  # in ARMS order, divrl last
    for kind in ("wall", "cpu"):
        phases = (*PHASES, "total")
        seconds = {arm: {p: [r[arm][kind][p] for r in rounds] for p in phases} for arm in arms}
        summary[kind] = {
            "median_seconds": {arm: {p: statistics.median(v) for p, v in seconds[arm].items()} for arm in arms},
            "best_seconds": {arm: {p: min(v) for p, v in seconds[arm].items()} for arm in arms},
        }
        for arm in arms[:-1]:
            ratios = [r[arm][kind]["total"] / r["divrl"][kind]["total"] for r in rounds]
            summary[kind][f"{arm}_over_divrl"] = {
                "per_round": ratios,
                "median": statistics.median(ratios),
                "best": min(seconds[arm]["total"]) / min(seconds["divrl"]["total"]),
            }
    summary["completion_tokens"] = {arm: statistics.mean(r[arm]["completion_tokens"] for r in rounds) for arm in arms}
    return summary


def write_markdown(path: Path, result: dict[str, Any]) -> None:
    """The `## ` fragment for BENCHMARKS.md: best and median seconds per phase, the ratios and the machine."""
    settings, summary = result["settings"], result["summary"]
    wall, cpu = summary["wall"], summary["cpu"]
    arms = list(summary["completion_tokens"])
    header = " | ".join(f"{arm} {stat}" for stat in ("best", "median") for arm in arms)
    rows = []
    for phase in (*PHASES, "total"):
        cells = [f"{wall[stat][arm][phase]:.1f}" for stat in ("best_seconds", "median_seconds") for arm in arms]
        rows.append(f"| {phase.replace('_', ' ')} | " + " | ".join(cells) + " |")
    tokens = " | ".join(f"{summary['completion_tokens'][arm]:.1f}" for arm in arms)
    rows.append(f"| mean completion tokens | {tokens} | {tokens} |")
    ratios = []
    for arm in arms[:-1]:
        w, c = wall[f"{arm}_over_divrl"], cpu[f"{arm}_over_divrl"]
        ratios.append(f"- {arm} / divrl: {w['best']:.2f}x between the best steps; per round "
                      f"{', '.join(f'{r:.2f}x' for r in w['per_round'])} (median {w['median']:.2f}x); process CPU "
                      f"time {c['best']:.2f}x between the best steps.")
    machine = result["machine"]
    load_note = ("the benchmark's own two threads: nothing else ran" if machine["load_after"] < machine["nproc"] + 0.5
                 else "the host was shared with other jobs: rounds that met heavy load are slower in every arm, "
                      "generation most; the best steps are the closest to an idle machine")
    text = f"""## CPU step time of the embedded model (`benchmarks/micro/cpu_step.py`)

One GRPO step of `{settings["model"]}` on the CPU with the Boolean CPU recipe's data: G={settings["num_generations"]}
completions of at most {settings["completion_length"]} tokens, 3-shot base prompts of about {settings["prompt_tokens"]}
tokens, LoRA r=16 on all linear projections, float32, no gradient checkpointing. `vanilla` is `trl.GRPOTrainer`
{settings["trl_version"]}; `before` is divrl's CPU path before completions stopped at END (same loss and sampling
distribution as vanilla; no stop, no prompt sharing); `divrl` is `DivRLTrainer` as the CPU recipe runs it now
(completions end at the END line; each group's prompt is computed once in the prefill and in the loss forward).
{settings["rounds"]} rounds, the arms alternating within each round; wall-clock seconds, best (minimum) and median
over rounds.

| phase | {header} |
|---|{"---|" * (2 * len(arms))}
{chr(10).join(rows)}

Step time over divrl's:
{chr(10).join(ratios)}

Machine: {machine["nproc"]} cores ({machine["cpu"]}), torch {machine["torch"]}, {machine["threads"]} torch threads;
{result["date"]}; 1-minute load average {machine["load_before"]:.1f} before and {machine["load_after"]:.1f} after the
run ({load_note}). A step lasts as long as its longest completion: divrl's steps vary with whether some row of the
group runs to the cap without writing END, which the per-round ratios show.
"""
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded:gemma-3-270m")
    parser.add_argument("--rounds", type=int, default=3, help="timed steps per arm (arms alternate)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--completion-length", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated subset of {ARMS} (divrl always runs)")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    arms = [arm for arm in ARMS if arm in {*args.arms.split(","), "divrl"}]
    if args.rounds < 1 or args.num_generations < 2 or args.completion_length < 1:
        parser.error("--rounds >= 1, --num-generations >= 2 and --completion-length >= 1 are required")

    import torch
    import trl
    from transformers import AutoTokenizer

    from divrl.models import resolve_model_name
    from divrl.tasks.hypospace import make_task

    load_before = os.getloadavg()[0]
    task = make_task("boolean", **TASK_ARGS)
    dataset = task.train_dataset(style="base", n_exemplars=3, limit=78)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name(args.model))
    prompt_tokens = round(statistics.mean(len(tokenizer(p)["input_ids"]) for p in dataset["prompt"]))
    with tempfile.TemporaryDirectory() as out_dir:
        trainers = {arm: build_trainer(arm, args, task, dataset, out_dir) for arm in arms}
        for trainer in trainers.values():
            warm_up(trainer)
        rounds = []
        for index in range(args.rounds):
            order = arms if index % 2 == 0 else arms[::-1]
            record = {}
            for arm in order:
                with arm_code(arm):
                    record[arm] = timed_step(trainers[arm])
            rounds.append({arm: record[arm] for arm in arms})
            print(
                f"round {index + 1}/{args.rounds}: "
                + ", ".join(f"{arm} {record[arm]['wall']['total']:.1f} s" for arm in arms),
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
        best = ", ".join(f"{arm} {summary['best_seconds'][arm]['total']:.1f} s" for arm in arms)
        ratios = ", ".join(f"{arm}/divrl {summary[f'{arm}_over_divrl']['best']:.2f}x best, "
                           f"{summary[f'{arm}_over_divrl']['median']:.2f}x median same-round" for arm in arms[:-1])
        print(f"{kind}: best {best}; {ratios}")


if __name__ == "__main__":
    main()
