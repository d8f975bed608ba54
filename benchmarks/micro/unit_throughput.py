"""Evidence-campaign throughput on the CPU: one `divrl train` at a time on every core, or several at once.

Evidence v2's training unit (its task, budget and learning rate, GRPO recipe, no held-out evaluation) for
`--steps` optimizer steps on `--workers` seeds. Arm `sequential` trains the seeds one after the other with
torch on every core (how `hypospace_recovery.py` ran until now); arm `parallel` trains them at the same time,
each with cores / workers threads. Both arms do the same steps on the same seeds, so the throughput ratio
(optimizer steps per minute of wall time) says whether `hypospace_recovery.py --workers` pays on this machine.
Completion lengths (the stop at END) make step times vary between seeds, which is why both arms run all seeds.
Writes benchmarks/results/unit_throughput.{json,md}. Run alone: other load distorts both arms differently.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from hypospace_recovery import MODEL, RECIPES, TASKS, V2  # noqa: E402
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"


def train_command(seed: int, steps: int, out: Path) -> list[str]:
    """`divrl train` of evidence v2's GRPO unit for `steps` steps, nothing saved or evaluated."""
    setting = TASKS[V2.task]
    return [sys.executable, "-m", "divrl.cli", "train", str(RECIPES / setting.task / "grpo.yaml"), *setting.train_args,
            "--per_device_train_batch_size", str(8 * V2.prompts_per_step), "--recovery_eval", "false",
            "--model_name_or_path", MODEL, "--max_steps", str(steps), "--seed", str(seed),
            "--learning_rate", str(V2.learning_rate), "--max_completion_length", str(setting.max_new_tokens),
            "--logging_steps", "1", "--save_strategy", "no", "--output_dir", str(out / f"seed{seed}")]


def run_arm(seeds: list[int], steps: int, threads: int, concurrent: bool, log: Path) -> float:
    """Wall seconds to train every seed (all at once if `concurrent`), torch on `threads` threads each."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, log.open("a") as handle:
        processes = []
        for seed in seeds:
            process = subprocess.Popen(train_command(seed, steps, Path(tmp)), env=env, stdout=handle,
                                       stderr=subprocess.STDOUT)
            if not concurrent and process.wait():
                raise SystemExit(f"divrl train (seed {seed}) failed; see {log}")
            processes.append(process)
        if any(process.wait() for process in processes):
            raise SystemExit(f"a divrl train failed; see {log}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps per seed (default 5)")
    parser.add_argument("--workers", type=int, default=2, help="trainings at once in the parallel arm (default 2)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    if args.workers < 2 or args.steps < 1 or cores % args.workers:
        raise SystemExit(f"--workers must be >= 2 and divide the {cores} cores; --steps >= 1")
    seeds = list(range(args.workers))
    log = Path(tempfile.gettempdir()) / "divrl-unit-throughput.log"
    log.write_text("")
    arms = {"sequential": (cores, False), "parallel": (cores // args.workers, True)}
    seconds = {}
    for name, (threads, concurrent) in arms.items():
        print(f"{name}: {len(seeds)} x {args.steps} steps, {threads} thread(s) each", flush=True)
        seconds[name] = run_arm(seeds, args.steps, threads, concurrent, log)
        print(f"  {seconds[name]:.0f} s", flush=True)
    total_steps = len(seeds) * args.steps
    per_minute = {name: 60 * total_steps / value for name, value in seconds.items()}
    speedup = seconds["sequential"] / seconds["parallel"]
    result = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "cpu": cpu_model(),
              "cores": cores, "workers": args.workers, "steps_per_seed": args.steps, "seeds": seeds,
              "seconds": seconds, "steps_per_minute": per_minute, "parallel_speedup": speedup,
              "load_average_after": [round(x, 1) for x in os.getloadavg()]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "unit_throughput.json").write_text(json.dumps(result, indent=1))
    text = "\n".join([
        "## Evidence-campaign throughput: sequential vs parallel training units "
        "(`benchmarks/micro/unit_throughput.py`)",
        "",
        f"Evidence v2's GRPO unit (Boolean, {V2.prompts_per_step} prompts x G=8 per step, lr {V2.learning_rate}, "
        f"no held-out evaluation), {args.steps} steps on each of seeds {seeds}, {MODEL}; {result['cpu']}, {cores} "
        f"cores, {result['date']}, load average {result['load_average_after']} after the run. One wall-clock "
        "measurement per arm (step times depend on completion lengths; both arms train the same seeds).", "",
        "| arm | torch threads per run | wall s | optimizer steps per minute |", "|---|---|---|---|",
        *[f"| {name} | {arms[name][0]} | {seconds[name]:.0f} | {per_minute[name]:.2f} |" for name in arms], "",
        f"Parallel / sequential throughput: **{speedup:.2f}x**.", ""])
    (RESULTS / "unit_throughput.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
