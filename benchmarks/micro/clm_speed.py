"""What one oracle call costs: the chemical LM (`embedded:smiles-clm`) against v4's Gemma-3-270M warm start.

In one run, on the same machine and thread count (`--threads`, default 1: one core, as a campaign lane), it
measures seconds per training step and per oracle call (a distinct valid molecule new to the run) of:
- the CLM recipe (`recipes/smiles-clm-cpu/molecules/grpo.yaml`, GRPO + Murcko bucket-10 filter, 64 molecules a
  step, full fine-tuning);
- evidence v4's Gemma recipe with its warm start's settings (v4's committed seed-0 SFT adapter merged into
  embedded:gemma-3-270m; 4 prompts x 8, 60 tokens, GRPO + the same filter), exactly as `molecules_v4.py` trains;
- sampling each warm start (64 samples of the CLM from BOS; 32 of Gemma over v4's RL prompts), no training.
Step times are TRL's per-step `step_time` after the first step (warm-up); calls per step are the logged oracle-call
count's increments. Then a whole 10,000-call GRPO + filter run of the CLM, timed end to end (the issue's target:
within 15 minutes on one core). Writes benchmarks/results/clm_speed.json and .md.
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
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

ROOT = BENCHMARKS.parent
RESULTS = ROOT / "benchmarks" / "results"
CLM_RECIPE = ROOT / "recipes" / "smiles-clm-cpu" / "molecules" / "grpo.yaml"
FILTER = "diversity_filter={scaffold: murcko, bucket_size: 10}"
BUDGET = 10_000


def divrl(args: list[str], threads: int) -> float:
    """Run the divrl CLI with `threads` torch threads; wall seconds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "divrl.cli", *args], check=True, env=env, cwd=ROOT)
    return time.monotonic() - started


def per_step(run: Path) -> dict[str, Any]:
    """Step seconds (after the first) and oracle calls per step from a run's trainer_state.json."""
    from divrl.analysis.runs import load_log_history

    logs = [entry for entry in load_log_history(run) if "step_time" in entry]
    calls = [entry["molecules/oracle_calls"] for entry in logs]
    increments = [b - a for a, b in zip([0.0, *calls[:-1]], calls, strict=True)]
    steps = [entry["step_time"] for entry in logs][1:]
    seconds, made = sum(steps), sum(increments[1:])
    return {"steps_timed": len(steps), "seconds_per_step": statistics.mean(steps), "calls_per_step": made / len(steps),
            "seconds_per_call": seconds / made if made else None,
            "validity": statistics.mean(entry["molecules/validity"] for entry in logs), "calls_total": calls[-1]}


def sampling_cost(model: str, prompts: list[str], per_prompt: int, seed: int, max_new_tokens: int,
                  stop: tuple[str, ...], rounds: int) -> dict[str, Any]:
    """Seconds per batch of `len(prompts) x per_prompt` samples and per distinct valid molecule (a fresh oracle
    call would be made for each new one), over `rounds` batches after a warm-up batch."""
    from divrl.sampling import SamplingConfig, make_sampler
    from divrl.tasks.molecules.chem import answer_smiles

    config = SamplingConfig(max_new_tokens=max_new_tokens, temperature=1.0, batch_size=len(prompts) * per_prompt,
                            seed=seed, stop=stop)
    sampler = make_sampler(model, config, quantize="none", dtype="float32")
    sampler(prompts, per_prompt)  # warm-up
    seen: set[str] = set()
    started = time.monotonic()
    for _ in range(rounds):
        for prompt, group in zip(prompts, sampler(prompts, per_prompt), strict=True):
            seen.update(s for s in (answer_smiles(c, prompt) for c in group) if s is not None)
    seconds = time.monotonic() - started
    return {"batches": rounds, "samples_per_batch": len(prompts) * per_prompt, "seconds_per_batch": seconds / rounds,
            "distinct_valid": len(seen), "seconds_per_call": seconds / len(seen) if seen else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=4, help="training steps per model (the first is not timed)")
    parser.add_argument("--rounds", type=int, default=3, help="sampling batches per model after a warm-up")
    parser.add_argument("--work", type=Path, default=ROOT.parent / "clm-speed-work")
    parser.add_argument("--skip-full-run", action="store_true", help="skip the 10,000-call CLM run")
    args = parser.parse_args()

    import molecules_v4 as v4
    import torch

    torch.set_num_threads(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    work = args.work
    gemma = v4.warm_start(work, 0, {})  # v4's seed-0 warm start, re-merged from its committed adapter
    steps = ["--max_steps", str(args.steps), "--logging_steps", "1", "--save_strategy", "no"]

    clm_run = work / "clm-grpo-df"
    divrl(["train", str(CLM_RECIPE), "--output_dir", str(clm_run), "--overwrite_output_dir", "true",
           "--task_arg", FILTER, *steps], args.threads)
    gemma_run = work / "gemma-grpo-df"
    recipe, _ = v4.ARMS["grpo+df"]
    divrl(["train", f"recipes/embedded-cpu/molecules/{recipe}", "--model_name_or_path", str(gemma),
           "--output_dir", str(gemma_run), "--overwrite_output_dir", "true", "--seed", "0",
           "--per_device_train_batch_size", str(v4.PROMPTS_PER_STEP * v4.GROUP), "--num_generations", str(v4.GROUP),
           "--max_completion_length", str(v4.MAX_NEW_TOKENS), "--learning_rate", "5e-5",
           "--lr_scheduler_type", "constant", "--stop_strings", *v4.STOP, "--task_arg", FILTER, *steps], args.threads)
    training = {"clm": per_step(clm_run), "gemma": per_step(gemma_run)}

    v4_prompts = [row["prompt"] for row in v4.prompt_rows("rl")[: v4.PROMPTS_PER_STEP]]
    sampling = {
        "clm": sampling_cost("embedded:smiles-clm", [""], 64, 0, 100, (), args.rounds),
        "gemma": sampling_cost(str(gemma), v4_prompts, v4.GROUP, 0, v4.MAX_NEW_TOKENS, v4.STOP, args.rounds),
    }
    full = None
    if not args.skip_full_run:
        full_run = work / "clm-grpo-df-10k"
        wall = divrl(["train", str(CLM_RECIPE), "--output_dir", str(full_run), "--overwrite_output_dir", "true",
                      "--task_arg", FILTER, "--task_arg", f"oracle_budget={BUDGET}", "--max_steps", "2000",
                      "--logging_steps", "1", "--save_strategy", "no"], args.threads)
        stats = per_step(full_run)
        full = {"wall_s": wall, "steps": stats["steps_timed"] + 1, "calls": stats["calls_total"], "budget": BUDGET,
                "within_15_min": wall <= 900,
                "validity": stats["validity"]}
    ratio = {kind: (training["gemma"]["seconds_per_call"] / training["clm"]["seconds_per_call"]
                    if training["clm"]["seconds_per_call"] and training["gemma"]["seconds_per_call"] else None)
             for kind in ("training",)}
    ratio["sampling"] = (sampling["gemma"]["seconds_per_call"] / sampling["clm"]["seconds_per_call"]
                         if sampling["clm"]["seconds_per_call"] and sampling["gemma"]["seconds_per_call"] else None)
    result = {"benchmark": "clm_speed", "threads": args.threads, "training": training, "sampling": sampling,
              "gemma_over_clm_per_call": ratio, "target_ratio": 30, "full_run": full,
              "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__, "load_average_at_end": os.getloadavg()},
              "date": datetime.date.today().isoformat(),
              "command": f"python benchmarks/micro/clm_speed.py --threads {args.threads} --steps {args.steps} "
                         f"--rounds {args.rounds}" + (" --skip-full-run" if args.skip_full_run else "")}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "clm_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "clm_speed.md").write_text(render(result))
    print(render(result))


def render(result: dict[str, Any]) -> str:
    """The results section for BENCHMARKS.md."""
    f = lambda v, spec=".2f": "n/a" if v is None else format(v, spec)  # noqa: E731
    training, sampling, ratio = result["training"], result["sampling"], result["gemma_over_clm_per_call"]
    lines = [
        "## Chemical LM against Gemma-3-270M: seconds per oracle call",
        "",
        f"`{result['command']}` on {result['date']}, {result['threads']} torch thread(s), {result['machine']['cpu']} "
        f"(load average at the end {result['machine']['load_average_at_end'][0]:.1f}). An oracle call is a distinct "
        "valid molecule new to the run.",
        "",
        "| | s / step | oracle calls / step | validity | s / oracle call |",
        "|---|---|---|---|---|",
        f"| CLM recipe, GRPO + filter (64 a step) | {f(training['clm']['seconds_per_step'])} | "
        f"{f(training['clm']['calls_per_step'], '.1f')} | {f(training['clm']['validity'])} | "
        f"{f(training['clm']['seconds_per_call'], '.3f')} |",
        f"| v4 Gemma warm start, GRPO + filter (32 a step) | {f(training['gemma']['seconds_per_step'])} | "
        f"{f(training['gemma']['calls_per_step'], '.1f')} | {f(training['gemma']['validity'])} | "
        f"{f(training['gemma']['seconds_per_call'], '.3f')} |",
        "",
        "| sampling only | s / batch | distinct valid over the batches | s / oracle call |",
        "|---|---|---|---|",
    ]
    for name, label in (("clm", "CLM, 64 from BOS"), ("gemma", "Gemma warm start, 4 prompts x 8")):
        row = sampling[name]
        lines.append(f"| {label} | {f(row['seconds_per_batch'])} | {row['distinct_valid']} | "
                     f"{f(row['seconds_per_call'], '.3f')} |")
    lines += ["", f"Gemma / CLM seconds per oracle call: training {f(ratio['training'], '.0f')}x, sampling "
              f"{f(ratio['sampling'], '.0f')}x (target: at least {result['target_ratio']}x)."]
    full = result["full_run"]
    if full:
        verdict = "within" if full["within_15_min"] else "NOT within"
        lines.append(f"A whole 10,000-call CLM GRPO + filter run took {full['wall_s'] / 60:.1f} min end to end "
                     f"({full['steps']} steps, {full['calls']:,.0f} calls, "
                     f"mean validity {full['validity']:.2f}): {verdict} the 15-minute target.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
