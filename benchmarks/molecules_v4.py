"""Evidence v4 (issue 41): molecules under a fixed oracle budget, with only a scorer.

Runs `benchmarks/evidence/molecules_v4/protocol.md` as written: the two pilots that fix K, tau, B and S_max, then
units (one arm, one seed) that each write their oracle-call history and measures into the state folder, then the
report (seed-level t-intervals, the target verdict, the Yield figure, the quality-diversity law fits).

    python benchmarks/molecules_v4.py pilot-warm-start     # SFT seed 0 to 128 steps; K and tau
    python benchmarks/molecules_v4.py pilot-budget         # GRPO 20 steps from SFT seed 0; B and S_max
    python benchmarks/molecules_v4.py run [--seeds 0 1] [--arms grpo ips]   # resumable, seed by seed
    python benchmarks/molecules_v4.py report               # results/molecules_v4.{md,json,png}

Heavy files (merged models, RL checkpoints) live in --work (default ../v4-work beside the checkout); the state
folder keeps what is committed: pilots, SFT adapters, each unit's history.jsonl, metrics.json and trainer log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evidence_weights import ensure_weight

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / "benchmarks" / "evidence" / "molecules_v4"
RESULTS = ROOT / "benchmarks" / "results"
BASE_MODEL = "embedded:gemma-3-270m"

# Fixed by the protocol.
PROMPT_SETS = {"rl": (64, 0), "dev": (16, 1), "eval": (16, 2)}  # name -> (prompts, build_rows seed); SFT: seed 3
SHOTS = 3
K_CANDIDATES = (16, 32, 64, 128)
DEV_SAMPLES, EVAL_SAMPLES = 128, 256
MAX_NEW_TOKENS = 60
STOP = ("\n",)  # a completion's molecule is its first line
PROMPTS_PER_STEP, GROUP = 4, 8
TAU, TAU2, OB_N, CIRCLE_DISTANCE = 0.8, 0.9, 100, 0.75
BUDGETS = (4096, 2048, 1024, 512)
LANE_MINUTES = 45
BUDGET_PILOT_STEPS = 20
REHEARSAL_SAMPLES = 4  # per RL prompt, for the fkl arm
SEEDS = (0, 1, 2, 3, 4)
DIVERSITY_FILTER = "diversity_filter={scaffold: murcko, bucket_size: 10}"
# arm -> (recipe under recipes/embedded-cpu/molecules, extra `divrl train` arguments); "sample" trains nothing.
ARMS: dict[str, tuple[str, list[str]] | None] = {
    "sample": None,
    "grpo": ("grpo.yaml", []),
    "ips": ("ips.yaml", []),
    "grpo+df": ("grpo.yaml", ["--task_arg", DIVERSITY_FILTER]),
    "ips+df": ("ips.yaml", ["--task_arg", DIVERSITY_FILTER]),
    "fkl": ("fkl.yaml", ["--divergence_estimator", "rehearsal"]),
}
EXTRA_ARMS: dict[str, tuple[str, list[str]]] = {"qd": ("qd.yaml", []), "pop": ("pop.yaml", []),
                                                 "maxent": ("maxent.yaml", [])}
TARGET_PAIRS = (("ips", "grpo"), ("ips+df", "grpo+df"), ("ips", "sample"), ("ips+df", "sample"))


# ------------------------------------------------------------------------------------------------ shared pieces
def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")


def divrl(*args: str) -> None:
    """Run the divrl CLI of this interpreter (one torch thread: the caller's OMP_NUM_THREADS), failing loudly."""
    command = [sys.executable, "-m", "divrl.cli", *args]
    log(" ".join(command))
    subprocess.run(command, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def prompt_rows(name: str) -> list[dict[str, Any]]:
    from divrl.tasks.molecules.data import build_rows

    count, seed = PROMPT_SETS[name]
    return build_rows(count, style="base", n_shots=SHOTS, seed=seed)


def sampler_for(model: str | Path, seed: int) -> Any:
    from divrl.sampling import SamplingConfig, make_sampler

    config = SamplingConfig(max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, batch_size=PROMPTS_PER_STEP * GROUP,
                            seed=seed, stop=STOP)
    return make_sampler(str(model), config, quantize="none", dtype="float32")


def sample_molecules(sampler: Any, rows: list[dict[str, Any]], per_prompt: int) -> list[str | None]:
    """`per_prompt` samples of each row's prompt, as molecules (None where a completion gives none)."""
    from divrl.tasks.molecules.chem import answer_smiles

    completions = sampler([row["prompt"] for row in rows], per_prompt)
    return [answer_smiles(c, row["prompt"]) for row, group in zip(rows, completions, strict=True) for c in group]


def sample_stats(smiles: list[str | None], tau: float) -> dict[str, Any]:
    """Validity (sanity-gated), uniqueness, MPO of the valid samples and #Circles of those above tau, on a fresh
    cache (the samples of one model, not a budget)."""
    import numpy as np

    from divrl.tasks.molecules import MoleculeTask
    from divrl.tasks.molecules.metrics import circles

    task = MoleculeTask()
    scores = task.scorer.score(smiles)
    valid = [(s, v) for s, v in zip(smiles, scores, strict=True) if s is not None and s not in task.scorer.rejected]
    values = np.array([v for _, v in valid]) if valid else np.zeros(0)
    hits = sorted({s for s, v in valid if v > tau})
    return {
        "samples": len(smiles), "validity": len(valid) / len(smiles),
        "uniqueness": len({s for s, _ in valid}) / len(valid) if valid else 0.0,
        "mean_mpo_valid": float(values.mean()) if valid else None,
        "mpo_percentiles_50_90_99": [float(p) for p in np.percentile(values, [50, 90, 99])] if valid else None,
        "fraction_above_tau": float((values > tau).mean()) if valid else 0.0,
        "circles_above_tau": circles(hits, threshold=CIRCLE_DISTANCE),
    }


def budget_measures(history: list[tuple[str, float]], budget: int, tau: float) -> dict[str, Any]:
    """The primary measures over the first `budget` calls of an oracle-call history."""
    from divrl.tasks.molecules.metrics import circles, generative_yield, intdiv_tdc, oracle_burden

    calls = history[:budget]
    hits = sorted({s for s, v in calls if v > tau})
    return {"calls": len(calls), "yield": generative_yield(calls, tau), "yield_tau2": generative_yield(calls, TAU2),
            "oracle_burden": oracle_burden(calls, tau, OB_N), "circles": circles(hits, threshold=CIRCLE_DISTANCE),
            "intdiv": intdiv_tdc(hits)}


# ------------------------------------------------------------------------------------------------ warm starts
def sft_dir(work: Path, seed: int) -> Path:
    return work / "sft" / f"seed{seed}"


def train_sft(work: Path, seed: int, steps: int, save_steps: int | None = None) -> Path:
    """SFT seed `seed` for `steps` steps into WORK/sft/seedS (or the pilot's folder), merged; returns the folder."""
    out = work / "sft" / ("pilot" if save_steps else f"seed{seed}")
    if (out / "merged" / "config.json").is_file():
        return out
    saving = ["--save_strategy", "steps", "--save_steps", str(save_steps)] if save_steps else []
    divrl("sft", "recipes/sft/molecules.yaml", "--max_steps", str(steps), "--seed", str(seed),
          "--output_dir", str(out), *saving)
    return out


def warm_start(work: Path, seed: int, settings: dict[str, Any]) -> Path:
    """The merged warm start of `seed`: trained once, its adapter kept in the state folder; re-merged from that
    adapter on a machine that lacks the merged weights."""
    from divrl.sft import merge_adapter

    kept = STATE / "sft" / f"seed{seed}"
    out = sft_dir(work, seed)
    if (out / "merged" / "config.json").is_file():
        return out / "merged"
    if ensure_weight(kept / "adapter_model.safetensors").is_file():
        log(f"re-merging the committed SFT adapter of seed {seed}")
        merge_adapter(kept, out / "merged", base=BASE_MODEL, dtype="float32")
        return out / "merged"
    train_sft(work, seed, settings["K"])
    kept.mkdir(parents=True, exist_ok=True)
    for name in ("adapter_model.safetensors", "adapter_config.json", "trainer_state.json"):
        shutil.copy2(out / name, kept / name)
    return out / "merged"


# ------------------------------------------------------------------------------------------------ pilots
def pilot_warm_start(work: Path) -> dict[str, Any]:
    """Pilot 1: SFT seed 0 with checkpoints at the candidates; dev validity of each; K and tau by the rule."""
    path = STATE / "pilots" / "warm_start.json"
    if path.is_file():
        return read_json(path)
    out = train_sft(work, 0, max(K_CANDIDATES), save_steps=min(K_CANDIDATES))
    rows = prompt_rows("dev")
    candidates = {}
    for k in K_CANDIDATES:
        sampler = sampler_for(out / f"checkpoint-{k}", seed=0)
        candidates[k] = sample_stats(sample_molecules(sampler, rows, DEV_SAMPLES // len(rows)), TAU)
        log(f"pilot K={k}: {candidates[k]}")
        del sampler
    nearest = min(K_CANDIDATES, key=lambda k: (abs(candidates[k]["validity"] - 0.5), k))
    p99 = candidates[nearest]["mpo_percentiles_50_90_99"][2] if candidates[nearest]["validity"] > 0 else 0.0
    tau = TAU if p99 >= TAU else math.floor(p99 / 0.05) * 0.05
    result = {"candidates": {str(k): v for k, v in candidates.items()}, "K": nearest,
              "in_band": 0.35 <= candidates[nearest]["validity"] <= 0.65, "tau": round(tau, 2),
              "rule": "K: dev validity nearest 0.5 (fewer steps on a tie); tau: 0.8 unless the chosen warm start's "
                      "99th MPO percentile is below it (then that percentile rounded down to 0.05)"}
    write_json(path, result)
    return result


def pilot_budget(work: Path) -> dict[str, Any]:
    """Pilot 2: GRPO from SFT seed 0 for 20 steps; c0 (calls per step) and t0 (median seconds per step) fix B and
    S_max."""
    path = STATE / "pilots" / "budget.json"
    if path.is_file():
        return read_json(path)
    warm = read_json(STATE / "pilots" / "warm_start.json")
    start = warm_start(work, 0, warm)
    out = work / "pilot-budget"
    timings = work / "pilot-budget-steps.json"
    train_rl(start, out, "grpo", 0, ["--max_steps", str(BUDGET_PILOT_STEPS)], step_times=timings)
    calls = len(final_history(out))
    seconds = read_json(timings)
    c0, t0 = calls / BUDGET_PILOT_STEPS, statistics.median(seconds)
    fits = [b for b in BUDGETS if b / c0 * t0 <= LANE_MINUTES * 60]
    budget = fits[0] if fits else BUDGETS[-1]
    result = {"calls": calls, "steps": BUDGET_PILOT_STEPS, "c0": c0, "t0_seconds": t0, "step_seconds": seconds,
              "B": budget, "B_fits_45_minutes": bool(fits), "S_max": math.ceil(2 * budget / c0),
              "minutes_per_unit_at_B": budget / c0 * t0 / 60}
    write_json(path, result)
    return result


def write_pilots_markdown(results: Path) -> None:
    """results/molecules_v4_pilots.md: what each pilot that has run measured and fixed, for BENCHMARKS.md."""
    lines = ["## Evidence v4 pilots (`benchmarks/molecules_v4.py pilot-warm-start`, `pilot-budget`)", "",
             "Rules fixed in `benchmarks/evidence/molecules_v4/protocol.md` before either pilot ran.", ""]
    warm_path, budget_path = STATE / "pilots" / "warm_start.json", STATE / "pilots" / "budget.json"
    if warm_path.is_file():
        warm = read_json(warm_path)
        lines += [f"Pilot 1, the warm start: SFT seed 0 of `recipes/sft/molecules.yaml` scored at each candidate on "
                  f"the dev prompts ({DEV_SAMPLES} samples, temperature 1, <= {MAX_NEW_TOKENS} tokens):", "",
                  "| SFT steps K | validity (sanity-gated) | uniqueness | mean MPO of valid | MPO p50 / p90 / p99 | "
                  f"fraction > {TAU} | #Circles > {TAU} |", "|---|---|---|---|---|---|---|"]
        for k, c in sorted(warm["candidates"].items(), key=lambda item: int(item[0])):
            pct = "-" if c["mpo_percentiles_50_90_99"] is None else \
                " / ".join(f"{v:.3f}" for v in c["mpo_percentiles_50_90_99"])
            mean = "-" if c["mean_mpo_valid"] is None else f"{c['mean_mpo_valid']:.3f}"
            lines.append(f"| {k} | {c['validity']:.3f} | {c['uniqueness']:.3f} | {mean} | {pct} | "
                         f"{c['fraction_above_tau']:.3f} | {c['circles_above_tau']} |")
        band = "inside" if warm["in_band"] else "OUTSIDE"
        lines += ["", f"Chosen: **K = {warm['K']}** (validity nearest 0.5; {band} [0.35, 0.65]); **tau = "
                      f"{warm['tau']}**.", ""]
    if budget_path.is_file():
        b = read_json(budget_path)
        lines += [f"Pilot 2, the budget: GRPO from SFT seed 0 for {b['steps']} steps on one lane: {b['calls']} oracle "
                  f"calls (c0 = {b['c0']:.2f} per step), median {b['t0_seconds']:.1f} s per step. "
                  f"**B = {b['B']}** calls ({'fits' if b['B_fits_45_minutes'] else 'does NOT fit'} 45 minutes: "
                  f"{b['minutes_per_unit_at_B']:.0f} minutes expected per RL unit); step cap **S_max = {b['S_max']}**.",
                  ""]
    results.mkdir(parents=True, exist_ok=True)
    (results / "molecules_v4_pilots.md").write_text("\n".join(lines))


def settings() -> dict[str, Any]:
    """K, tau, B and S_max from the two pilots (both must have run)."""
    warm, budget = STATE / "pilots" / "warm_start.json", STATE / "pilots" / "budget.json"
    if not (warm.is_file() and budget.is_file()):
        raise SystemExit("molecules_v4: run pilot-warm-start and pilot-budget first")
    return {**read_json(warm), **read_json(budget)}


# ------------------------------------------------------------------------------------------------ units
def train_rl(start: Path, out: Path, arm: str, seed: int, extra: list[str], step_times: Path | None = None) -> None:
    """`divrl train` of one RL arm at the protocol's settings from the merged warm start `start`."""
    recipe, arm_args = (ARMS | EXTRA_ARMS)[arm]
    resume = ["--resume_from_checkpoint", "true"] if any(out.glob("checkpoint-*")) else []
    args = ["train", f"recipes/embedded-cpu/molecules/{recipe}", "--model_name_or_path", str(start),
            "--output_dir", str(out), "--seed", str(seed), "--per_device_train_batch_size",
            str(PROMPTS_PER_STEP * GROUP), "--num_generations", str(GROUP), "--gradient_accumulation_steps", "1",
            "--max_completion_length", str(MAX_NEW_TOKENS), "--temperature", "1.0", "--learning_rate", "5e-5",
            "--lr_scheduler_type", "constant", "--beta", "0.0", "--logging_steps", "1", "--save_strategy", "steps",
            "--save_steps", "10", "--save_total_limit", "2", "--stop_strings", *STOP, *arm_args, *extra, *resume]
    started = time.time()
    divrl(*args)
    if step_times is not None:
        write_json(step_times, step_seconds(out, time.time() - started))


def step_seconds(out: Path, total: float) -> list[float]:
    """Seconds per step from the run's log (TRL logs `step_time` per step), else the mean over the run."""
    from divrl.analysis.runs import load_log_history

    times = [entry["step_time"] for entry in load_log_history(out) if "step_time" in entry]
    return times or [total / BUDGET_PILOT_STEPS]


def final_history(out: Path) -> list[tuple[str, float]]:
    """The oracle-call history of a finished RL run: its newest checkpoint's task state (process 0)."""
    import torch

    from divrl.trainers.checkpoint import last_complete_checkpoint

    checkpoint = last_complete_checkpoint(str(out))
    if checkpoint is None:
        raise SystemExit(f"molecules_v4: {out} has no complete checkpoint with the oracle history")
    state = torch.load(Path(checkpoint) / "divrl_state.pt", weights_only=True)
    return [(s, float(v)) for s, v in state["task"][0]["scorer"]["history"]]


def run_sample_arm(start: Path, seed: int, budget: int, max_chunks: int) -> tuple[list[tuple[str, float]],
                                                                                   dict[str, Any]]:
    """Arm 1: sample the warm start over the RL prompts, 4 prompts x 8 at a time (an RL step's samples), until B calls
    or `max_chunks` chunks: the RL arms' cap of S_max steps, so every arm draws at most the same samples."""
    from divrl.tasks.molecules import MoleculeTask

    task, rows = MoleculeTask(), prompt_rows("rl")
    sampler = sampler_for(start, seed)
    drawn, chunk = 0, 0
    while task.scorer.oracle_calls < budget and chunk < max_chunks:
        first = (chunk * PROMPTS_PER_STEP) % len(rows)
        task.scorer.score(sample_molecules(sampler, rows[first:first + PROMPTS_PER_STEP], GROUP))
        drawn, chunk = drawn + PROMPTS_PER_STEP * GROUP, chunk + 1
        if chunk % 10 == 0:
            log(f"sample seed {seed}: {drawn} samples, {task.scorer.oracle_calls} calls")
    return list(task.scorer.history), {"samples": drawn}


def rehearsal_set(start: Path, out: Path, seed: int, tau: float) -> Path:
    """The fkl arm's rehearsal set: 4 samples of each RL prompt from the warm start, keeping those above tau; its
    oracle calls are written to OUT/history.jsonl, where the RL run's history starts."""
    from divrl.models import load_model_and_tokenizer
    from divrl.tasks.molecules import MoleculeTask
    from divrl.tasks.molecules.chem import answer_smiles
    from divrl.tasks.molecules.scoring import write_history
    from divrl.trainers.rehearsal import sample_reference

    if (out / "history.jsonl").is_file():
        return out
    task, rows = MoleculeTask(), prompt_rows("rl")
    model, tokenizer = load_model_and_tokenizer(str(start), quantize="none", dtype="float32", cpu=True)

    def above_tau(index: int, text: str) -> float:
        return float(task.scorer.score([answer_smiles(text, rows[index]["prompt"])])[0] > tau)

    sample_reference(model, tokenizer, [row["prompt"] for row in rows], out, num_samples=REHEARSAL_SAMPLES,
                     max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, batch_size=PROMPTS_PER_STEP * GROUP, seed=seed,
                     stop_strings=STOP, score=above_tau, correct_only=True)
    write_history(out / "history.jsonl", task.scorer.history)
    return out


def run_unit(work: Path, arm: str, seed: int, config: dict[str, Any]) -> None:
    """One unit: train (or sample), then its history, measures, fresh samples and trainer log into the state."""
    unit = STATE / "units" / f"{arm}-seed{seed}"
    if (unit / "metrics.json").is_file():
        return
    start = warm_start(work, seed, config)
    budget, tau = config["B"], config["tau"]
    began = time.time()
    log(f"unit {arm} seed {seed}: B={budget}, tau={tau}")
    if arm == "sample":
        history, extra = run_sample_arm(start, seed, budget, config["S_max"])
        final_model: Path = start
    else:
        out = work / "runs" / f"{arm}-seed{seed}"
        args = ["--max_steps", str(config["S_max"]), "--task_arg", f"oracle_budget={budget}"]
        if arm == "fkl":
            rehearsal = rehearsal_set(start, work / "rehearsal" / f"seed{seed}", seed, tau)
            args += ["--divergence_rehearsal_path", str(rehearsal),
                     "--task_arg", f"oracle_history={rehearsal / 'history.jsonl'}"]
        train_rl(start, out, arm, seed, args)
        history = final_history(out)
        state = read_json(out / "trainer_state.json")
        extra = {"steps": state["global_step"]}
        unit.mkdir(parents=True, exist_ok=True)
        shutil.copy2(out / "trainer_state.json", unit / "trainer_state.json")
        final_model = out
    from divrl.tasks.molecules.scoring import write_history

    unit.mkdir(parents=True, exist_ok=True)
    write_history(unit / "history.jsonl", history)
    fresh = sample_stats(sample_molecules(sampler_for(final_model, 1000 + seed), prompt_rows("eval"),
                                          EVAL_SAMPLES // PROMPT_SETS["eval"][0]), tau)
    measures = budget_measures(history, budget, tau)
    metrics = {"arm": arm, "seed": seed, "B": budget, "tau": tau, **measures, **extra,
               "stopped_short": measures["calls"] < budget, "fresh": fresh,
               "wall_minutes": (time.time() - began) / 60, "threads": os.environ.get("OMP_NUM_THREADS")}
    write_json(unit / "metrics.json", metrics)
    log(f"unit {arm} seed {seed} done: {metrics}")


def main(argv: list[str] | None = None) -> int:
    global STATE  # a pinned worktree's campaign writes into main's state folder (--state)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("pilot-warm-start", "pilot-budget", "run", "report"))
    parser.add_argument("--work", type=Path, default=ROOT.parent / "v4-work", help="heavy files (default ../v4-work)")
    parser.add_argument("--state", type=Path, default=STATE, help="the committed state folder (a pinned worktree's "
                        "campaign points it at main's)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the report goes")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS | EXTRA_ARMS))
    args = parser.parse_args(argv)
    STATE = args.state.resolve()
    os.chdir(ROOT)  # recipes are named relative to the checkout
    if args.command in ("pilot-warm-start", "pilot-budget"):
        pilot = pilot_warm_start if args.command == "pilot-warm-start" else pilot_budget
        print(json.dumps(pilot(args.work), indent=1))
        write_pilots_markdown(args.results)
    elif args.command == "run":
        config = settings()
        for seed in args.seeds:
            for arm in args.arms:
                run_unit(args.work, arm, seed, config)
    else:
        from molecules_v4_report import write_report

        write_report(STATE, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
