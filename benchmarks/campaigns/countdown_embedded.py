"""Countdown end to end on the embedded Gemma-3-270M, on the CPU: the worked example of a task, run as a user would.

Checks the recipes with `divrl train --dry_run`, trains GRPO and IPS-GRPO for a few steps with the embedded-cpu
Countdown recipes (`divrl train`, one line per step), then evaluates the base model and both adapters on held-out
Countdown instances with `divrl eval task` (validity, solved prompts, distinct correct expressions per prompt).
Writes results/countdown_embedded.json and .md with the numbers, the settings and the wall times. A few steps of one
seed show that the pipeline runs on a task of the user's kind, not which method is better.

    python benchmarks/campaigns/countdown_embedded.py [--steps 8] [--prompts 20] [--samples 8]
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
from machine import cpu_model  # noqa: E402

ROOT = BENCHMARKS.parent
RESULTS = BENCHMARKS / "results"
RECIPES = ROOT / "recipes" / "embedded-cpu" / "countdown"
METHODS = ("grpo", "ips")
MODEL = "embedded:gemma-3-270m"


def divrl(*args: str) -> float:
    """Run `divrl ARGS` as a user would (output passes through); its wall seconds."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "divrl.cli", *args], cwd=ROOT, check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="training steps per method (default 8)")
    parser.add_argument("--prompts", type=int, default=20, help="held-out Countdown instances (default 20)")
    parser.add_argument("--samples", type=int, default=8, help="samples per instance (default 8)")
    args = parser.parse_args()
    from divrl.train import load_recipe_file

    task_args = load_recipe_file(str(RECIPES / "grpo.yaml"))["task_args"]  # the evaluation's instances are the recipes'
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"  # the code it runs: recorded before it runs
    timings, results = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        for method in METHODS:
            recipe = str(RECIPES / f"{method}.yaml")
            timings[f"dry run {method}"] = divrl("train", recipe, "--dry_run")
            timings[f"train {method}"] = divrl(
                "train", recipe, "--max_steps", str(args.steps), "--console_log", "compact", "--logging_steps", "1",
                "--save_strategy", "no", "--output_dir", str(out / method), "--overwrite_output_dir", "true")
        for label, model in [("base", MODEL), *((method, str(out / method)) for method in METHODS)]:
            timings[f"evaluate {label}"] = divrl(
                "eval", "task", "--task", "countdown",
                *(arg for key, value in task_args.items() for arg in ("--task-arg", f"{key}={value}")),
                "--model", model, "--split", "test", "--limit", str(args.prompts),
                "--samples", str(args.samples), "--prompt-style", "base", "--n-exemplars", "3",
                "--max-new-tokens", "60", "--out", str(out / f"eval-{label}"))
            result = json.loads((out / f"eval-{label}" / "task_eval.json").read_text())
            results[label] = {key: result[key] for key in ("validity", "solved_prompts", "mean_reward",
                                                           "distinct_correct_per_prompt", "prompts", "samples")}
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc = {"settings": {**vars(args), "task_args": task_args}, "models": results, "timings_s": timings,
           "commit": commit, "cpu": cpu_model(),
           "cores": os.cpu_count(), "load_average": [round(x, 1) for x in os.getloadavg()], "date": date}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "countdown_embedded.json").write_text(json.dumps(doc, indent=1))
    lines = ["## Countdown on the embedded model (`benchmarks/campaigns/countdown_embedded.py`)", "",
             f"`recipes/embedded-cpu/countdown/{{grpo,ips}}.yaml` (task_args {json.dumps(task_args)}) trained for "
             f"{args.steps} steps each, then `divrl eval task` on {args.prompts} held-out instances x {args.samples} "
             f"samples (base prompts, 3 worked examples). Commit {commit}, {date}, {os.cpu_count()} cores "
             f"({cpu_model()}), load average {', '.join(str(round(x, 1)) for x in os.getloadavg())} at the end. One "
             "seed and a few steps: this shows the pipeline on a user's kind of task, not which method is better.", "",
             "| model | validity | solved prompts | distinct correct expressions per prompt |", "|---|---|---|---|"]
    for label, r in results.items():
        distinct = r["distinct_correct_per_prompt"]
        lines.append(f"| {label} | {r['validity']:.3f} | {r['solved_prompts']:.3f} | "
                     f"{'-' if distinct is None else f'{distinct:.2f}'} |")
    lines += ["", "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()), ""]
    (RESULTS / "countdown_embedded.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
