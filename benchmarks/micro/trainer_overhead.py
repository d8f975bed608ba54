"""Step-time and peak-memory overhead of the divrl trainers over vanilla TRL GRPOTrainer.

Same randomly initialised Qwen3 (hidden 256 x 4 layers by default, the local 512-token tokenizer), LoRA
r=16 on all linear layers, data, seeds and GRPO settings for every trainer. Step time = process CPU time
and wall time from `on_step_begin` to `on_step_end` (generation, reward shaping, loss, backward and
optimizer step); goals are judged on CPU time on CPU runs (single-threaded, little disturbed by other
load on a shared machine) and on wall time on CUDA. All
trainers live in one process and run in rounds: each round visits them in a fresh random order, `--steps`
steps each, and the first step of every visit is dropped. The ratio of a method to its baseline is the
geometric mean over rounds of (mean step time / baseline mean step time in the same round), with a 95%
bootstrap interval over rounds. Baselines: vanilla GRPO (beta = 0); for the divergence trainer (JS on
policy samples, beta = 0) vanilla GRPO with beta = 0.04, which computes the same reference log-probs. The
`divrl` row (DivRLTrainer with every method off) separates the cost of divrl's plumbing and CPU kernels from
the methods' own.
Peak memory: a fresh subprocess per trainer, peak resident memory (sampled every 5 ms) during construction
and `--memory-steps` steps minus the resident memory before the model is loaded (on CUDA: peak allocated
GPU memory). Torch runs `--threads` intra-op threads (default 1: on a shared 2-core machine competing
OpenMP threads made steps 5-10x slower and far noisier).
Writes benchmarks/results/trainer_overhead.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402
from timing import CLOCKS, geometric_ratio, interleaved_rounds, step_timer  # noqa: E402

RESULTS = BENCHMARKS / "results"
PROMPTS = [f"idea {i}: propose a {w} experiment about {t}" for i, (w, t) in enumerate(
    (w, t) for w in ("simple", "bold", "cheap", "careful", "novel", "fast")
    for t in ("molecules", "rings", "numbers", "proofs", "graphs", "memory"))]
# name: (trainer class in divrl, or None for trl.GRPOTrainer; config overrides; baseline name; step-time goal)
TRAINERS: dict[str, tuple[str | None, dict[str, Any], str | None, float | None]] = {
    "vanilla": (None, {}, None, None),
    "vanilla_beta": (None, {"beta": 0.04}, None, None),
    "vanilla_reuse": (None, {"num_iterations": 2}, None, None),  # every batch used twice (KL-Cov's baseline)
    # Every method off: what divrl's own plumbing and CPU kernels cost (or save) before any method runs.
    "divrl": ("DivRLTrainer", {}, "vanilla", None),
    "divrl_reuse": ("DivRLTrainer", {"num_iterations": 2}, "vanilla_reuse", None),  # the same, batches used twice
    "ips": ("IPSGRPOTrainer", {"ips_outcome_key": "text"}, "vanilla", 1.03),
    "qd": ("QDGRPOTrainer", {}, "vanilla", 1.03),
    "maxent": ("MaxEntGRPOTrainer", {}, "vanilla", 1.10),
    "divergence": ("DivergenceGRPOTrainer", {"divergence": "js", "beta": 0.0}, "vanilla_beta", 1.05),
    # Issue 13 / 15 methods: each should add <= 3% to a step (issue 15).
    "count": ("CountBonusGRPOTrainer", {"ips_outcome_key": "text"}, "vanilla", 1.03),
    "semantic": ("IPSGRPOTrainer", {"ips_outcome_key": "semantic"}, "vanilla", 1.03),
    "passk": ("PassAtKGRPOTrainer", {"passk": 2}, "vanilla", 1.03),  # groups of 4 here: k = 2
    "unlikely": ("UnlikelinessGRPOTrainer", {}, "vanilla", 1.03),
    "clip_cov": ("DivRLTrainer", {"cov_method": "clip_cov"}, "vanilla", 1.03),
    "kl_cov": ("DivRLTrainer", {"cov_method": "kl_cov", "num_iterations": 2}, "vanilla_reuse", 1.03),
}

# A vanilla baseline's method-less DivRLTrainer counterpart (the last column of the table).
METHODLESS = {"vanilla": "divrl", "vanilla_reuse": "divrl_reuse"}


def distinct_chars(completions: list, **_: Any) -> list[float]:
    """A reward that varies between random completions (a constant one gives zero advantages)."""
    return [float(len(set(c if isinstance(c, str) else c[-1]["content"]))) for c in completions]


class BenchTask:
    """Behaviour descriptor for QD from the text: distinct-character and vowel fractions, in [0, 1]^2."""

    name = "bench"
    behavior_dims = 2

    def reward_funcs(self) -> list:
        return [distinct_chars]

    def behavior(self, completion: str, **_: Any) -> list[float] | None:
        if not completion:
            return None
        return [min(len(set(completion)) / 40, 1.0), sum(c in "aeiou" for c in completion) / len(completion)]


def make_trainer(name: str, model_dir: Path, out: Path, args: argparse.Namespace, callbacks: list) -> Any:
    """The trainer `name` of TRAINERS with the shared settings."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import divrl

    class_name, overrides, _, _ = TRAINERS[name]
    cuda = torch.cuda.is_available()
    common = dict(
        output_dir=str(out / name), use_cpu=not cuda, bf16=cuda, per_device_train_batch_size=args.batch,
        num_generations=args.generations, max_completion_length=args.completion_length, max_steps=args.steps,
        learning_rate=1e-4, logging_steps=10**6, report_to=[], save_strategy="no", disable_tqdm=True, seed=0,
        activation_checkpointing=False,
    )
    common.update(overrides)
    lora = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0)
    kwargs = dict(train_dataset=Dataset.from_dict({"prompt": PROMPTS}),
                  processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=lora, callbacks=callbacks)
    if class_name is None:
        return GRPOTrainer(str(model_dir), reward_funcs=[distinct_chars], args=GRPOConfig(**common), **kwargs)
    trainer_class = getattr(divrl, class_name)
    return trainer_class(str(model_dir), args=divrl.DivRLConfig(**common), task=BenchTask(), **kwargs)


def time_trainers(model_dir: Path, out: Path, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Per-round mean step time of every trainer, per clock ("cpu", "wall"); interleaved rounds, one process."""
    trainers, timers = {}, {}
    for name in args.trainers:
        callback, timers[name] = step_timer()
        trainers[name] = make_trainer(name, model_dir, out, args, [callback])
    return interleaved_rounds(trainers, timers, args.rounds, statistics.fmean, seed=args.seed)


class ResidentPeak(threading.Thread):
    """Samples this process's resident memory (/proc/self/statm) until stopped; keeps the maximum."""

    def __init__(self, interval: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.interval, self.peak, self._stop_event = interval, current_rss(), threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.peak = max(self.peak, current_rss())

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return max(self.peak, current_rss())


def current_rss() -> int:
    """Resident set size of this process in bytes."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_memory_child(name: str, model_dir: Path, args: argparse.Namespace) -> None:
    """Run in a subprocess: print the peak memory growth of one trainer over `--memory-steps` steps."""
    import datasets  # noqa: F401  (every library imported before the baseline: only training is measured)
    import peft  # noqa: F401
    import torch
    import trl  # noqa: F401

    import divrl.trainers.presets  # noqa: F401

    cuda = torch.cuda.is_available()
    args.steps = args.memory_steps
    before = current_rss()
    sampler = ResidentPeak()
    sampler.start()
    with tempfile.TemporaryDirectory() as out:
        trainer = make_trainer(name, model_dir, Path(out), args, [])
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
    peak = sampler.stop() - before
    if cuda:
        peak = torch.cuda.max_memory_allocated()
    print(json.dumps({"peak_bytes": peak, "device": "cuda" if cuda else "cpu"}))


def measure_memory(model_dir: Path, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Peak memory growth of each trainer, each in a fresh process."""
    results = {}
    for name in args.trainers:
        command = [sys.executable, __file__, "--memory-child", name, "--model-dir", str(model_dir),
                   *_shared_flags(args)]
        done = subprocess.run(command, capture_output=True, text=True, check=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)})
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"memory {name}: {results[name]['peak_bytes'] / 2**20:.1f} MiB", flush=True)
    return results


def _shared_flags(args: argparse.Namespace) -> list[str]:
    return ["--threads", str(args.threads), "--batch", str(args.batch), "--generations", str(args.generations),
            "--completion-length", str(args.completion_length), "--memory-steps", str(args.memory_steps)]


def summarise(per_round: dict[str, dict[str, list[float]]], memory: dict[str, dict[str, Any]] | None,
              primary: str) -> list[dict[str, Any]]:
    """One row per divrl trainer: step-time ratios with intervals per clock, goal verdict, memory ratio."""
    rows = []
    for name in per_round[primary]:
        _, _, baseline, goal = TRAINERS[name]
        if baseline is None or baseline not in per_round[primary]:
            continue
        row: dict[str, Any] = {"trainer": name, "baseline": baseline, "goal": goal}
        for clock in CLOCKS:
            mine, base = per_round[clock][name], per_round[clock][baseline]
            ratio, low, high = geometric_ratio([m / b for m, b in zip(mine, base, strict=True)])
            row[clock] = {"step_time_s": sum(mine) / len(mine), "baseline_step_time_s": sum(base) / len(base),
                          "ratio": ratio, "ci95": [low, high]}
        plain_name = METHODLESS.get(baseline)
        if plain_name is not None and name != plain_name and plain_name in per_round[primary]:
            # The same method against DivRLTrainer with every method off: its cost alone, without the CPU kernels.
            mine, plain = per_round[primary][name], per_round[primary][plain_name]
            row["vs_divrl"] = dict(zip(("ratio", "ci_low", "ci_high"), geometric_ratio(
                [m / b for m, b in zip(mine, plain, strict=True)]), strict=True))
        low, high = row[primary]["ci95"]
        row["goal_met"] = "n/a" if goal is None else "yes" if high <= goal else "no" if low > goal else "unresolved"
        if memory is not None:
            row["peak_memory_ratio"] = memory[name]["peak_bytes"] / memory[baseline]["peak_bytes"]
            row["peak_memory_mib"] = memory[name]["peak_bytes"] / 2**20
        rows.append(row)
    return rows


def machine() -> dict[str, Any]:
    return {"nproc": os.cpu_count(), "cpu": cpu_model(), "python": platform.python_version(),
            "load_average": [round(x, 1) for x in os.getloadavg()]}


def write_results(rows: list[dict[str, Any]], per_round: dict[str, dict[str, list[float]]], primary: str,
                  args: argparse.Namespace, elapsed: float) -> None:
    import torch

    info = machine()
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    device = f"CUDA {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "CPU"
    config = {k: getattr(args, k) for k in ("hidden", "layers", "batch", "generations", "completion_length",
                                            "rounds", "steps", "memory_steps", "threads", "seed")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(
        {"config": config, "machine": info, "device": device, "date": date, "elapsed_s": elapsed,
         "goal_clock": primary, "rows": rows, "per_round_step_time_s": per_round}, indent=2))
    clock_text = {"cpu": "process CPU time", "wall": "wall time"}
    lines = [
        "## divrl trainer overhead vs vanilla GRPO (`benchmarks/micro/trainer_overhead.py`)",
        "",
        f"Random-init Qwen3 {args.hidden} hidden x {args.layers} layers (vocabulary 512), LoRA r=16 all-linear, "
        f"{args.batch} completions per step ({args.generations} per prompt) of up to {args.completion_length} "
        f"tokens, {device}, {args.threads} torch thread(s). {args.rounds} interleaved rounds x {args.steps} "
        "steps per trainer (first step of each round dropped); ratio = geometric mean over rounds of the "
        "per-round step-time ratio, 95% bootstrap interval. The goal is judged on "
        f"{clock_text[primary]} per step (on a single-threaded CPU run it is far less disturbed by other load "
        "than wall time, which is shown too): `yes` if the whole interval is within the goal, `no` if entirely "
        "above, `unresolved` otherwise (run more rounds). Peak memory: peak resident memory of a fresh process "
        f"over construction + {args.memory_steps} steps minus its resident memory before loading the model "
        "(GPU: peak allocated); the ratio is to the baseline's. The goals compare with vanilla TRL as specified; "
        "the last column compares each method with DivRLTrainer with every method off (row `divrl`; `divrl_reuse` "
        "for a method that uses each batch twice), which takes divrl's CPU log-prob and sampling kernels out of the "
        "comparison.",
        "",
        "| trainer | baseline | CPU s/step (baseline) | CPU ratio (95% CI) | wall s/step (baseline) "
        f"| wall ratio (95% CI) | goal | met | peak memory ratio | {primary} ratio vs `divrl` (95% CI) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = []
        for clock in CLOCKS:
            c = r[clock]
            cells += [f"{c['step_time_s']:.3f} ({c['baseline_step_time_s']:.3f})",
                      f"{c['ratio']:.3f} ({c['ci95'][0]:.3f}-{c['ci95'][1]:.3f})"]
        memory = f"{r['peak_memory_ratio']:.2f} ({r['peak_memory_mib']:.0f} MiB)" if "peak_memory_ratio" in r else "-"
        goal = "-" if r["goal"] is None else f"<= {r['goal']:.2f}"
        plain = r.get("vs_divrl")
        plain_cell = "-" if plain is None else f"{plain['ratio']:.3f} ({plain['ci_low']:.3f}-{plain['ci_high']:.3f})"
        lines.append(f"| {r['trainer']} | {r['baseline']} | " + " | ".join(cells) + f" | {goal} | {r['goal_met']} "
                     f"| {memory} | {plain_cell} |")
    lines += ["", f"Machine: {info['nproc']} cores ({info['cpu']}), Python {info['python']}, load average "
              f"{', '.join(map(str, info['load_average']))} at the end (a shared machine: wall times are noisy). "
              f"Run time {elapsed:.0f} s. Date: {date}.", ""]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40, help="interleaved rounds (default 40)")
    parser.add_argument("--steps", type=int, default=3, help="steps per trainer per round, first dropped (default 3)")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="completions per step")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (group size)")
    parser.add_argument("--completion-length", type=int, default=32)
    parser.add_argument("--memory-steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=list(TRAINERS))
    parser.add_argument("--skip-memory", action="store_true", help="no peak-memory subprocesses")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="trainer_overhead", help="results file stem")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    if args.memory_child:
        peak_memory_child(args.memory_child, args.model_dir, args)
        return
    needed = {TRAINERS[n][2] for n in args.trainers} - {None}
    args.trainers = [n for n in TRAINERS if n in set(args.trainers) | needed]  # baselines always run
    from divrl.testing import build_tiny_model

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_tiny_model("qwen3", Path(tmp) / "model", hidden_size=args.hidden, num_layers=args.layers)
        per_round = time_trainers(model_dir, Path(tmp) / "runs", args)
        memory = None if args.skip_memory else measure_memory(model_dir, args)
        primary = "wall" if torch.cuda.is_available() else "cpu"  # GPU work is asynchronous to the CPU clock
        rows = summarise(per_round, memory, primary)
        write_results(rows, per_round, primary, args, time.perf_counter() - start)


if __name__ == "__main__":
    main()
