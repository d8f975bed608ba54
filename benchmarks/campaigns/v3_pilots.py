"""Evidence v3's two pilots, run before any campaign unit by the rules its protocol fixed in advance.

`warm-start`: how many `divrl sft` steps make a WEAK warm start (held-out validity near 0.5, so RL has validity to
raise), chosen on the train split alone: each candidate trains on the split's "fit" part and is scored on its "dev"
fifth (never the test split). `budget`: how many RL steps every arm gets: GRPO seed 0 from the campaign's SFT seed 0
runs `MAX_BUDGET` steps at the campaign's settings, and the budget is where its training validity stops rising.
Both write benchmarks/results/v3_pilots.{json,md}; their small files stay under the campaign's evidence folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
import hypospace_recovery as bench  # noqa: E402

STATE = BENCHMARKS / "evidence" / "hypospace_recovery_v3_voxel"
RESULTS = BENCHMARKS / "results" / "v3_pilots"
SFT_CANDIDATES = (6, 9, 12)  # warm-start steps tried (8 rows a step, the SFT recipe's learning rate 2e-4)
TARGET_VALIDITY = 0.5  # the candidate whose dev validity is nearest wins; fewer steps on a tie
DEV_SAMPLES = 16  # samples per dev instance
MAX_BUDGET = 40  # steps of the GRPO budget pilot
WINDOW = 8  # steps per window of training validity
PLATEAU_RISE = 0.05  # a window that rises less than this over the window before it ends the budget
MIN_BUDGET = 16


def warm_start_pilot(log: Path) -> dict[str, Any]:
    """Train every candidate on "fit" and score it on "dev"; the rule picks the steps."""
    setting = bench.TASKS["voxel"]
    rows = []
    for steps in SFT_CANDIDATES:
        run = STATE / "pilots" / f"sft-fit-{steps}steps"
        merged = run / "merged"
        if not any(merged.glob("*.safetensors")):
            print(f"  warm-start candidate: {steps} steps on the fit split", flush=True)
            bench._divrl(["sft", str(bench.ROOT / "recipes" / "sft" / f"{setting.task}.yaml"), *setting.train_args,
                          "--split", "fit", "--max_steps", str(steps), "--model_name_or_path", bench.MODEL,
                          "--seed", "0", "--sample_seed", "0", "--output_dir", str(run)], log)
        out = STATE / "pilots" / "eval" / f"sft-fit-{steps}steps"
        if not (out / "recovery.json").is_file():
            print(f"  scoring {steps} steps on the dev split ({DEV_SAMPLES} samples per instance)", flush=True)
            bench._divrl(["eval", "recovery", "--model", str(merged), "--task", setting.task,
                          *setting.eval_args(zero_shot=True), "--split", "dev", "--samples", str(DEV_SAMPLES),
                          "--max-new-tokens", str(setting.max_new_tokens), "--out", str(out)], log)
        entry = json.loads((out / "recovery.json").read_text())["models"][0]
        rows.append({"steps": steps, "dev_validity": float(np.mean([i["validity"] for i in entry["instances"]])),
                     "dev_instances": len(entry["instances"])})
    chosen = min(rows, key=lambda row: (abs(row["dev_validity"] - TARGET_VALIDITY), row["steps"]))
    return {"candidates": rows, "chosen_steps": chosen["steps"], "rule": f"dev validity nearest {TARGET_VALIDITY}"}


def plateau_budget(validity: list[float]) -> dict[str, Any]:
    """Windows of `WINDOW` steps of training validity; the budget ends the first window (from the second on) that
    rises less than `PLATEAU_RISE` over the one before it, at least `MIN_BUDGET`; `MAX_BUDGET` if none does. Decided
    (`decided`) as soon as such a window is complete, or after `MAX_BUDGET` steps: later steps cannot change it."""
    windows = [float(np.mean(validity[i:i + WINDOW])) for i in range(0, len(validity) - WINDOW + 1, WINDOW)]
    for j in range(1, len(windows)):
        if windows[j] - windows[j - 1] < PLATEAU_RISE:
            return {"windows": windows, "budget": max(MIN_BUDGET, WINDOW * (j + 1)), "decided": True,
                    "steps_read": len(validity)}
    return {"windows": windows, "budget": MAX_BUDGET, "decided": len(validity) >= MAX_BUDGET,
            "steps_read": len(validity)}


def budget_pilot(sft_steps: int, log: Path) -> dict[str, Any]:
    """GRPO seed 0 from the campaign's SFT seed 0 for `MAX_BUDGET` steps (no held-out evaluation: the rule reads
    training validity); the plateau rule gives the budget."""
    from divrl.analysis.runs import load_log_history, metric_series

    protocol = bench.Protocol(**{**bench.V3_VOXEL.__dict__, "sft_steps": sft_steps, "steps": MAX_BUDGET,
                                 "eval_steps": None})
    setting = bench.TASKS[protocol.task]
    model = bench.warm_start(protocol, 0, STATE, log)  # the campaign's SFT seed 0, which it then reuses
    run = STATE / "pilots" / "grpo-budget-seed0"
    checkpoint = bench._resumable_checkpoint(run) if run.is_dir() else None
    if checkpoint is not None:  # the rule may have decided already: the steps after that cannot change the budget
        validity = [value for _, value in metric_series(load_log_history(checkpoint), "divrl/primary_reward")]
        if plateau_budget(validity)["decided"]:
            return {"validity": validity, **plateau_budget(validity), "read_from": checkpoint.name}
    if not ((run / "trainer_state.json").is_file() and any(run.glob("*.safetensors"))):
        print(f"  GRPO budget pilot: {MAX_BUDGET} steps" + (f", resuming from {checkpoint.name}" if checkpoint else ""),
              flush=True)
        bench._divrl(["train", str(bench.RECIPES / setting.task / "grpo.yaml"), *setting.train_args,
                      "--per_device_train_batch_size", str(8 * protocol.prompts_per_step), "--n_exemplars", "0",
                      "--recovery_eval", "false", "--model_name_or_path", str(model),
                      "--max_steps", str(MAX_BUDGET), "--seed", "0", "--learning_rate", str(protocol.learning_rate),
                      "--max_completion_length", str(setting.max_new_tokens), "--logging_steps", "1",
                      "--save_strategy", "steps", "--save_steps", "8", "--save_total_limit", "1",
                      "--output_dir", str(run), *protocol.schedule_args,
                      *(["--resume_from_checkpoint", str(checkpoint)] if checkpoint else
                        ["--overwrite_output_dir", "true"])], log)
    validity = [value for _, value in metric_series(load_log_history(run), "divrl/primary_reward")]
    return {"validity": validity, **plateau_budget(validity)}


def prepare_warm_starts(sft_steps: int, seeds: list[int], log: Path) -> None:
    """Train and merge the campaign's SFT warm starts of `seeds` (the campaign's own `warm_start` command, which
    the campaign then finds done) while the budget pilot runs; their evaluations are campaign units."""
    protocol = bench.Protocol(**{**bench.V3_VOXEL.__dict__, "sft_steps": sft_steps})
    for seed in seeds:
        bench.warm_start(protocol, seed, STATE, log)


def markdown(data: dict[str, Any]) -> str:
    """The pilots' section of BENCHMARKS.md."""
    lines = ["## Evidence v3 pilots (benchmarks/campaigns/v3_pilots.py)", "",
             "Rules fixed in benchmarks/evidence/hypospace_recovery_v3_voxel/protocol.md before they ran.", ""]
    warm = data.get("warm_start")
    if warm:
        lines += [f"Weak warm start, chosen on the train split alone (`divrl sft` on its fit part, {DEV_SAMPLES} "
                  f"samples per instance of its dev fifth; rule: {warm['rule']}, fewer steps on a tie):", "",
                  "| SFT steps (8 rows each) | dev validity | dev instances |", "|---|---|---|",
                  *(f"| {r['steps']}{' (chosen)' if r['steps'] == warm['chosen_steps'] else ''} | "
                    f"{r['dev_validity']:.3f} | {r['dev_instances']} |" for r in warm["candidates"]), ""]
    budget = data.get("budget")
    if budget:
        windows = ", ".join(f"{w:.3f}" for w in budget["windows"])
        read = (f" (the run was stopped at step {budget['steps_read']}, when the rule had decided: its later steps "
                f"could not change the budget)" if budget.get("steps_read", MAX_BUDGET) < MAX_BUDGET else "")
        lines += [f"RL budget: GRPO seed 0, up to {MAX_BUDGET} steps from SFT seed 0 at constant learning rate; "
                  f"training validity per window of {WINDOW} steps: {windows}{read}. Rule: the budget ends the first "
                  f"window that rises less than {PLATEAU_RISE} over the one before (at least {MIN_BUDGET} steps): "
                  f"**{budget['budget']} steps**.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pilot", choices=["warm-start", "budget", "warm-starts"],
                        help="warm-start, budget: the two pilots; warm-starts: train the campaign's SFT warm starts of "
                             "--seeds with the chosen steps (no evaluation) beside the budget pilot")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    args = parser.parse_args()
    (STATE / "pilots").mkdir(parents=True, exist_ok=True)
    log = STATE / "pilots" / f"{args.pilot}.log.txt"
    data = json.loads(RESULTS.with_suffix(".json").read_text()) if RESULTS.with_suffix(".json").is_file() else {}
    if args.pilot == "warm-start":
        data["warm_start"] = warm_start_pilot(log)
    elif "warm_start" not in data:
        raise SystemExit(f"run the warm-start pilot first: `{args.pilot}` starts from its chosen warm start")
    elif args.pilot == "warm-starts":
        prepare_warm_starts(data["warm_start"]["chosen_steps"], args.seeds, log)
        return
    else:
        data["budget"] = budget_pilot(data["warm_start"]["chosen_steps"], log)
    RESULTS.with_suffix(".json").write_text(json.dumps(data, indent=1))
    RESULTS.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
