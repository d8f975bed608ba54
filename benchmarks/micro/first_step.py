"""Where the demo's first training step goes: a cProfile of each of its first steps (issue 60: "step 1 took ~190 s").

Builds the demo's GRPO training exactly as `divrl demo` runs it (`divrl.demo.training_flags`: embedded Gemma-3-270M,
HypoSpace Boolean, 2 prompts x a group of 8, seed 42) and profiles steps 1 to STEPS one by one (a TrainerCallback
switches cProfile on at each step's start and off at its end). Reports each step's profiled seconds, the seconds
of each part of a step (generation, the log-probability forward passes, backward, the optimizer, rewards) and its
mean completion length per step, and the functions whose own time grew most from a later step to step 1. Writes
results/first_step.json and .md.
Run it with the machine otherwise idle for wall times; the parts' shares hold under load too.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
STEPS = 3
# The parts of a GRPO step, by the function whose cumulative time is the part's: (a piece of its file's path, "" for
# any file (divrl's trainer overrides TRL's hooks of these names), function name).
PARTS = {"generation": ("", "_generate"),
         "log-probability forward passes": ("", "_get_per_token_logps_and_entropies"),
         "backward": ("torch/_tensor.py", "backward"),
         "optimizer step": ("torch/optim/adam", "step"),  # AdamW's step (adamw.py, or adam.py it derives from)
         "rewards": ("", "_calculate_rewards")}


def profile_steps(steps: int, out: Path) -> tuple[list[pstats.Stats], list[float]]:
    """Train the demo's GRPO for `steps` steps into `out`, one cProfile per step; the steps' stats and their mean
    completion lengths in tokens, in order."""
    from transformers import TrainerCallback

    from divrl import demo
    from divrl.cli import build_parser
    from divrl.cpu_threads import use_free_cores
    from divrl.models import resolve_model_name
    from divrl.train import build_trainer, parse_recipe

    args = build_parser().parse_args(["demo", "--steps", str(steps)])
    use_free_cores()
    resolve_model_name(args.model, progress=lambda _: None)  # a first preparation is not part of a step
    profiles: list[pstats.Stats] = []

    class StepProfiler(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.profile = cProfile.Profile()
            self.profile.enable()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.profile.disable()
            profiles.append(pstats.Stats(self.profile))

    trainer = build_trainer(*parse_recipe(["--config", *demo.training_flags("grpo", args, out)]))
    trainer.add_callback(StepProfiler())
    trainer.train()
    lengths = [entry["completions/mean_length"] for entry in trainer.state.log_history
               if "completions/mean_length" in entry]
    return profiles, lengths


def part_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds of each of PARTS in one step's profile (0 where the function did not run)."""
    seconds = dict.fromkeys(PARTS, 0.0)
    for (filename, _, function), (_, _, _, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        for part, (path_piece, name) in PARTS.items():
            if function == name and path_piece in filename:
                seconds[part] = max(seconds[part], cumulative)  # recursion: the outermost call's time
    return seconds


def own_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Each function's own (not cumulative) seconds in one step's profile, keyed 'file:line(function)'."""
    return {f"{Path(filename).name}:{line}({function})": own
            for (filename, line, function), (_, _, own, _, _) in stats.stats.items()}  # type: ignore[attr-defined]


def summarise(profiles: list[pstats.Stats], top: int = 12) -> dict[str, Any]:
    """Per step: total profiled seconds and the parts; the functions whose own time in step 1 most exceeds their
    median own time in the later steps."""
    totals = [stats.total_tt for stats in profiles]  # type: ignore[attr-defined]
    first, later = own_seconds(profiles[0]), [own_seconds(stats) for stats in profiles[1:]]

    def later_median(name: str) -> float:
        return statistics.median(step.get(name, 0.0) for step in later) if later else 0.0

    excess = sorted(((name, own - later_median(name)) for name, own in first.items()), key=lambda item: -item[1])
    return {"step_seconds": totals, "parts": [part_seconds(stats) for stats in profiles],
            "first_step_excess": [{"function": name, "seconds": seconds, "step1_own": first[name],
                                   "later_median_own": later_median(name)} for name, seconds in excess[:top]]}


def markdown(doc: dict[str, Any]) -> str:
    """results/first_step.md: the steps' seconds by part, then where step 1's extra seconds went."""
    steps = range(1, len(doc["step_seconds"]) + 1)
    lengths = doc.get("completion_tokens") or []
    lines = ["## The demo's first training step (`benchmarks/micro/first_step.py`)", "",
             f"The demo's GRPO training (embedded Gemma-3-270M, HypoSpace Boolean, 2 prompts x 8 completions, seed "
             f"42) profiled step by step with cProfile, {doc['torch_threads']} torch thread(s), {doc['cores']} cores "
             f"({doc['cpu']}), commit {doc['commit']}, {doc['date']}, 1-minute load average {doc['load_before']:.1f} "
             f"before and {doc['load_after']:.1f} after. Seconds under the profiler (it adds some overhead to Python "
             "calls; torch's kernels run at full speed).", "",
             "| part | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for part in PARTS:
        lines.append(f"| {part} | " + " | ".join(f"{p[part]:.2f}" for p in doc["parts"]) + " |")
    lines.append("| whole step | " + " | ".join(f"{s:.1f}" for s in doc["step_seconds"]) + " |")
    if lengths:
        lines.append("| mean completion length (tokens) | " + " | ".join(f"{n:.1f}" for n in lengths) + " |")
    lines += ["", "Where step 1's extra seconds went: the functions whose own time in step 1 most exceeds their "
              "median in the later steps.", "", "| function | step 1 own s | later steps' median own s | excess s |",
              "|---|---|---|---|"]
    for row in doc["first_step_excess"]:
        lines.append(f"| `{row['function']}` | {row['step1_own']:.2f} | {row['later_median_own']:.2f} | "
                     f"{row['seconds']:+.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps profiled (default {STEPS}, at least 2)")
    args = parser.parse_args()
    if args.steps < 2:
        raise SystemExit("first_step: --steps must be at least 2 (step 1 is read against the later ones)")
    import torch

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as out:
        began = time.perf_counter()
        profiles, lengths = profile_steps(args.steps, Path(out))
        wall = time.perf_counter() - began
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=7"], cwd=BENCHMARKS.parent,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    doc = {**summarise(profiles), "completion_tokens": lengths, "torch_threads": torch.get_num_threads(),
           "cores": os.cpu_count(), "cpu": cpu_model(), "commit": commit, "load_before": load_before,
           "load_after": os.getloadavg()[0],
           "wall_seconds_with_loading": wall,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "first_step.json").write_text(json.dumps(doc, indent=1))
    (RESULTS / "first_step.md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
