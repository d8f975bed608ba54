"""`divrl demo` (what `make demo` runs): what divrl is for, on the CPU, in minutes.

It opens with the toy comparison (`divrl.toy.overview`: GRPO's collapse and the remedies' coverage on the bandit and
the hyper-grid, 5 seeds, seconds), then divrl's chemical LM on a PMO oracle (`divrl.tasks.molecules.clm_demo`: prior
sampling vs GRPO vs IPS-GRPO behind a scaffold filter, 3 seeds), then runs GRPO vs IPS-GRPO on a real LLM. That part
drives the same entry points a user runs: prepares the embedded Gemma-3-270M, trains it briefly with the CPU recipes
`recipes/embedded-cpu/hypospace-boolean/{grpo,ips}.yaml` (`divrl train`) on HypoSpace Boolean expressions (x, y;
AND / OR; depth 2: the domain where the small base model writes valid answers, about 4 in 10, so training has a
signal and the effect of each method shows in validity and in how many different answers it writes), evaluates the
base model and both adapters with recovery curves on held-out observation sets (`divrl eval recovery`), and writes
`OUT/report.md` with the tables, the curves and the training signatures. One seed is not evidence, so the report
puts the run beside the committed multi-seed result of the same settings
(`benchmarks/campaigns/demo_seeds.py`, results/demo_seeds.json): one seed is read against known spread.

Every phase runs in this one process, so the demo returns freed tensors to the system as it goes (`divrl.memory`):
without that, glibc's heap kept the largest phase's activations resident through all the later ones (issue 12: about
10 GB during training and evaluation). Its peak RSS is in the report.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ROOT / "recipes" / "embedded-cpu" / "hypospace-boolean"
# The committed multi-seed results of the demo's settings: the LLM phase's and the molecule phase's
# (benchmarks/campaigns/demo_seeds.py, demo_molecule_seeds.py).
SEEDS_RESULT = ROOT / "benchmarks" / "results" / "demo_seeds.json"
MOLECULE_SEEDS_RESULT = ROOT / "benchmarks" / "results" / "demo_molecule_seeds.json"
BOOLEAN = {"operators": "basic", "max_depth": 2}  # evidence v2's setting: 36 observation sets
MAX_NEW_TOKENS = 24  # the longest Boolean answer is 11 tokens with its END line
# Training signals plotted and summarised: unshaped validity and distinct valid answers per group of 8.
SIGNALS = {"validity": "divrl/primary_reward", "distinct valid answers per group": "diversity/distinct_valid"}


def _banner(step: int, total: int, text: str, start: float) -> None:
    print(f"\n[{step}/{total}] {text}  (elapsed {time.time() - start:.0f} s)", flush=True)


def sub_step(text: str) -> None:
    """Print a step of a phase (the model preparation's `[1/4] ...`) indented and labelled as a sub-step."""
    print(f"    sub-step {text}", flush=True)


def training_signals(run_dir: Path) -> dict[str, list[float]]:
    """Per-step values of each of SIGNALS in one run's log (missing signals are empty)."""
    from divrl.analysis.runs import load_log_history, metric_series

    history = load_log_history(run_dir)
    return {name: [row[1] for row in metric_series(history, key)] for name, key in SIGNALS.items()}


def _halves(values: list[float]) -> str:
    """Mean of the first and of the second half of the steps, 'a -> b'."""
    if len(values) < 2:
        return "n/a"
    half = len(values) // 2
    return f"{sum(values[:half]) / half:.2f} -> {sum(values[half:]) / (len(values) - half):.2f}"


def plot_training(signals: dict[str, dict[str, list[float]]], path: Path) -> None:
    """Training curves of every method, one panel per signal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SIGNALS), figsize=(5 * len(SIGNALS), 3.4))
    for ax, name in zip(axes, SIGNALS, strict=True):
        for method, series in signals.items():
            ax.plot(range(1, len(series[name]) + 1), series[name], marker="o", label=method)
        ax.set(xlabel="training step", title=name)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# The held-out numbers of each model the report shows and the committed multi-seed result summarises.
HELD_OUT = {"validity": "validity", "rr": "RR@N", "distinct_valid": "distinct valid found",
            "modal_share": "modal share"}


def demo_settings(args: argparse.Namespace) -> dict[str, Any]:
    """Everything but the seed that fixes what a demo run computes: two runs compare only when these are equal."""
    return {"model": args.model, "task": "hypospace-boolean", "task_args": BOOLEAN, "methods": list(args.methods),
            "steps": args.steps, "prompts_per_step": args.prompts_per_step, "learning_rate": args.learning_rate,
            "instances": args.instances, "samples": args.samples}


def training_flags(method: str, args: argparse.Namespace, out: Path) -> list[str]:
    """`divrl train`'s arguments for training `method` as the demo does (the recipe's path first) into `out`."""
    return [str(RECIPES / f"{method}.yaml"), "--model_name_or_path", args.model,
            *(arg for key, value in BOOLEAN.items() for arg in ("--task_arg", f"{key}={value}")),
            "--max_steps", str(args.steps), "--instance_limit", str(args.instances),
            "--per_device_train_batch_size", str(8 * args.prompts_per_step),
            "--learning_rate", str(args.learning_rate), "--max_completion_length", str(MAX_NEW_TOKENS),
            "--seed", str(args.seed), "--console_log", "compact",
            "--output_dir", str(out), "--overwrite_output_dir", "true",  # a rerun trains afresh
            "--logging_steps", "1", "--save_strategy", "no",
            # the demo evaluates every model on held-out instances once training ends
            "--recovery_eval", "false"]


def held_out_numbers(recovery: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per model ('base' for the untrained one, which the demo evaluates first; else the method), HELD_OUT's values."""
    from divrl.tasks.hypospace.recovery import modal_share

    numbers = {}
    for index, model in enumerate(recovery["models"]):
        instances = model["instances"]
        numbers["base" if index == 0 else model["label"]] = {
            "validity": model["validity"]["mean"], "rr": model["recovery"]["mean"],
            "distinct_valid": model["distinct_valid"]["mean"][-1],
            "modal_share": sum(modal_share(i["proposals"]) for i in instances) / len(instances)}
    return numbers


def add_held_out_to_cards(out: Path, args: argparse.Namespace, recovery: dict[str, Any]) -> None:
    """Each trained adapter's model card gets the demo's held-out numbers of it, beside the base model's: the
    card's own metrics are one training batch's, which alone can read as a contradiction."""
    from divrl.trainers.model_card import add_held_out

    numbers = held_out_numbers(recovery)
    labels = {**HELD_OUT, "rr": f"RR@{args.samples}"}
    base = ", ".join(f"{labels[key]} {value:.3f}" for key, value in numbers["base"].items())
    note = (f"`divrl demo` sampled {args.samples} completions for each of the "
            f"{len(recovery['models'][0]['instances'])} held-out observation sets of hypospace-boolean {BOOLEAN} "
            f"(sample seed {args.seed}) from this adapter, and alike from its untrained base model: {base}. One "
            "seed: read it beside the demo's multi-seed result (report.md).")
    for method in args.methods:
        add_held_out(out / method, "divrl demo, after training", {labels[key]: value for key, value in
                                                                   numbers[method].items()}, note)


def evidence_lines(settings: dict[str, Any], seed: int, numbers: dict[str, dict[str, float]],
                   committed_path: Path = SEEDS_RESULT) -> list[str]:
    """The report's section that reads this run against the committed multi-seed result of the same settings."""
    lines = ["## This run beside the committed multi-seed result", ""]
    if not committed_path.is_file():
        return lines + [f"No committed result at {committed_path}: `python benchmarks/campaigns/demo_seeds.py` "
                        "writes it."]
    committed = json.loads(committed_path.read_text())
    if committed["settings"] != settings:
        differ = sorted(k for k in settings.keys() | committed["settings"].keys()
                        if settings.get(k) != committed["settings"].get(k))
        return lines + [f"The committed result ({committed_path.name}) is for other settings (they differ in "
                        f"{', '.join(differ)}), so this run has nothing of its own settings to be read against."]
    seeds = committed["seeds"]
    lines += [f"The same settings, run by `benchmarks/campaigns/demo_seeds.py` with {len(seeds)} seeds "
              f"({', '.join(map(str, seeds))}; "
              f"commit {committed['commit']}, {committed['date'][:10]}). This run is seed {seed}"
              + (", one of them." if seed in seeds else ".") + " The interval is a Student-t interval over seeds "
              "(df = seeds - 1) for the mean; the range is where single seeds fell.", "",
              "| model | metric | this run | committed mean [95% t-interval] | committed range |",
              "|---|---|---|---|---|"]
    for model, metrics in committed["models"].items():
        for metric, label in HELD_OUT.items():
            stat, mine = metrics[metric], numbers.get(model, {}).get(metric)
            lines.append(f"| {model} | {label} | {'-' if mine is None else f'{mine:.3f}'} | {stat['mean']:.3f} "
                         f"[{stat['ci_low']:.3f}, {stat['ci_high']:.3f}] | {stat['min']:.3f} to {stat['max']:.3f} |")
    for pair, metrics in committed.get("paired", {}).items():
        first, second = pair.split(" - ")
        for metric in ("validity", "rr"):
            stat = metrics[metric]
            mine = numbers[first][metric] - numbers[second][metric] if {first, second} <= numbers.keys() else None
            lines.append(f"| {pair} (paired by seed) | {HELD_OUT[metric]} | {'-' if mine is None else f'{mine:+.3f}'} "
                         f"| {stat['mean']:+.3f} [{stat['ci_low']:+.3f}, {stat['ci_high']:+.3f}] | "
                         f"{stat['min']:+.3f} to {stat['max']:+.3f} |")
    return lines


def write_report(out: Path, args: argparse.Namespace, timings: dict[str, float], peak_rss: int | None = None,
                 toy_lines: list[str] | None = None, molecule_lines: list[str] | None = None) -> Path:
    """`report.md`: the toy comparison, the chemical LM on a PMO oracle, the LLM run's held-out table (95% intervals
    over instances), its training signatures, the run beside the committed multi-seed result, timings and the
    plots."""
    recovery = json.loads((out / "eval" / "recovery.json").read_text())
    numbers = held_out_numbers(recovery)
    (out / "held_out.json").write_text(json.dumps(
        {"settings": demo_settings(args), "seed": args.seed, "models": numbers}, indent=1))
    signals = {method: training_signals(out / method) for method in args.methods}
    plot_training(signals, out / "training.png")
    lines = ["# divrl demo: what diversity-preserving RL is for, then GRPO vs IPS-GRPO on a real LLM (CPU)", ""]
    if toy_lines:
        lines += ["## Toy environments: where plain GRPO collapses", "",
                  "Each method trains a softmax policy on outcomes with known rewards: a 4-armed bandit (rewards 1, 2, "
                  "3, 4) and a 2-D hyper-grid with 4 high-reward modes. Plain GRPO maximises expected reward, so it "
                  "puts all its probability on one outcome; a method that keeps the answer space should end near the "
                  "target, probability proportional to reward. Final numbers are means over the last 10 steps, "
                  "mean ± std over 5 seeds (on the hyper-grid an outcome is a cell; the bars group cells by mode):",
                  "", *toy_lines, "", "![toy comparison](toy.png)", ""]
    if molecule_lines:
        lines += [*molecule_lines, ""]
    if toy_lines or molecule_lines:
        lines += ["## A real LLM: GRPO vs IPS-GRPO", ""]
    lines += [
        f"Model `{args.model}`, task hypospace-boolean {BOOLEAN}: {args.instances} observation sets split 50/50, "
        f"{args.steps} training steps per method of {args.prompts_per_step} prompt(s) x a group of 8 completions "
        f"(learning rate {args.learning_rate}, seed {args.seed}), then {args.samples} samples per held-out "
        "observation set. One seed is not evidence: read it against the multi-seed result below.",
        "",
        "Held-out (RR@N: share of an observation set's admissible expressions found by N samples; 95% interval over "
        "observation sets; modal share: share of its samples taken by the most frequent answer):",
        "",
        f"| model | validity | RR@{args.samples} | 95% CI | distinct valid found | modal share |",
        "|---|---|---|---|---|---|",
    ]
    for model, values in zip(recovery["models"], numbers.values(), strict=True):
        rr = model["recovery"]
        lines.append(f"| {model['label']} | {values['validity']:.3f} | {values['rr']:.3f} | "
                     f"[{rr['ci_low']:.3f}, {rr['ci_high']:.3f}] | {values['distinct_valid']:.2f} | "
                     f"{values['modal_share']:.2f} |")
    lines += ["", "Training, mean of the first -> second half of the steps (validity before IPS's reweighting; every "
              "logged metric of a method is in its folder's metrics.jsonl):", "",
              "| method | " + " | ".join(SIGNALS) + " |", "|---|" + "---|" * len(SIGNALS)]
    for method, series in signals.items():
        lines.append(f"| {method} | " + " | ".join(_halves(series[name]) for name in SIGNALS) + " |")
    lines += ["", *evidence_lines(demo_settings(args), args.seed, numbers)]
    lines += ["", "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())]
    if peak_rss is not None:
        lines += ["", f"Peak memory (resident set size of the demo process): {peak_rss / 1e9:.2f} GB"]
    lines += ["", "![recovery curves](eval/recovery.png)", "", "![training](training.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def run_demo(args: argparse.Namespace) -> int:
    """The toy comparison, then prepare, train each method, evaluate all models, report; prints progress throughout."""
    from divrl.cli import main as divrl
    from divrl.cpu_threads import use_free_cores
    from divrl.memory import peak_rss_bytes, release_freed_memory, return_large_frees_to_os
    from divrl.models import resolve_model_name
    from divrl.tasks.hypospace.recovery_cli import recipe_eval_flags
    from divrl.train import load_recipe_file

    if min(args.steps, args.prompts_per_step, args.instances, args.samples) < 1 or not args.learning_rate > 0:
        raise SystemExit("divrl demo: --steps, --prompts-per-step, --instances and --samples must be >= 1 and "
                         "--learning-rate > 0")
    if not RECIPES.is_dir():
        raise SystemExit(f"divrl demo needs the repository's recipes/ folder ({RECIPES} not found): run it from a "
                         "source checkout (`make demo`)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    use_free_cores()  # once, before any phase adds load of its own; the trainings keep this choice
    return_large_frees_to_os()  # before the first large allocation: each phase's tensors go back when freed
    total = len(args.methods) + 3 + (not args.skip_toy) + (not args.skip_molecules)
    phase = iter(range(1, total + 1))
    start = time.time()
    timings: dict[str, float] = {}
    toy_lines = None
    if not args.skip_toy:
        from divrl.toy.overview import METHODS, run_overview

        _banner(next(phase), total, f"toy comparison: {', '.join(METHODS)} on the bandit and the hyper-grid, 5 seeds",
                start)
        _, toy_lines = run_overview(out)
        print("\n".join(toy_lines), flush=True)
        timings["toy"] = time.time() - start
    molecule_lines = None
    if not args.skip_molecules:
        from divrl.tasks.molecules import clm_demo

        t0 = time.time()
        _banner(next(phase), total, f"molecules: the chemical LM on PMO's {clm_demo.OBJECTIVE}, prior sampling vs "
                f"GRPO vs IPS-GRPO, {len(clm_demo.SEEDS)} seeds", start)
        molecule_lines = clm_demo.report_lines(clm_demo.run_phase(out, progress=sub_step), MOLECULE_SEEDS_RESULT)
        print("\n".join(molecule_lines[:-2]), flush=True)
        release_freed_memory()
        timings["molecules"] = time.time() - t0
    t0 = time.time()
    _banner(next(phase), total, f"preparing {args.model}", start)
    resolve_model_name(args.model, progress=sub_step)  # the first preparation's [1/4]..[4/4], inside this phase
    release_freed_memory()  # the conversion's copies (first use), before training
    timings["prepare"] = time.time() - t0
    for method in args.methods:
        _banner(next(phase), total, f"training {method} for {args.steps} steps", start)
        t0 = time.time()
        code = divrl(["train", *training_flags(method, args, out / method)])
        if code:
            return code
        release_freed_memory()  # the finished trainer and its model, before the next phase loads another
        timings[f"train {method}"] = time.time() - t0
    _banner(next(phase), total, f"recovery evaluation of base + {', '.join(args.methods)}", start)
    t0 = time.time()
    models = [arg for label, model in [(f"{args.model} (base)", args.model),
                                       *((method, str(out / method)) for method in args.methods)]
              for arg in ("--model", model, "--label", label)]
    prompt_flags = recipe_eval_flags(load_recipe_file(str(RECIPES / "grpo.yaml")))
    code = divrl(["eval", "recovery", *models, "--task", "hypospace-boolean", "--operators", BOOLEAN["operators"],
                  "--max-depth", str(BOOLEAN["max_depth"]), *prompt_flags, "--limit", str(args.instances),
                  "--split", "test", "--samples", str(args.samples), "--max-new-tokens", str(MAX_NEW_TOKENS),
                  "--sample-seed", str(args.seed), "--out", str(out / "eval")])
    if code:
        return code
    timings["evaluate"] = time.time() - t0
    add_held_out_to_cards(out, args, json.loads((out / "eval" / "recovery.json").read_text()))
    timings["total"] = time.time() - start
    _banner(next(phase), total, "writing the report", start)
    print(f"wrote {write_report(out, args, timings, peak_rss_bytes(), toy_lines, molecule_lines)}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl demo`."""
    parser = subparsers.add_parser(
        "demo", help="The toy comparison, then GRPO vs IPS-GRPO on the embedded LLM (CPU, minutes).")
    parser.add_argument("--model", default="embedded:gemma-3-270m", help="model to train (default: embedded)")
    parser.add_argument("--methods", nargs="+", default=["grpo", "ips"], choices=["grpo", "ips", "qd", "maxent",
                        "fkl", "js"], help="CPU recipes to train (default: grpo ips)")
    parser.add_argument("--steps", type=int, default=8, help="training steps per method (default 8)")
    parser.add_argument("--prompts-per-step", type=int, default=2,
                        help="observation sets per step, each with a group of 8 completions (default 2)")
    parser.add_argument("--learning-rate", type=float, default=1e-4, help="LoRA learning rate (default 1e-4)")
    parser.add_argument("--instances", type=int, default=18,
                        help="observation sets before the 50/50 split (default 18 of the task's 36)")
    parser.add_argument("--samples", type=int, default=8, help="samples per held-out observation set (default 8)")
    parser.add_argument("--seed", type=int, default=42, help="training seed and held-out sampling seed (default 42, "
                        "the recipes'; benchmarks/campaigns/demo_seeds.py runs 42 to 46)")
    parser.add_argument("--skip-toy", action="store_true", help="skip the opening toy comparison")
    parser.add_argument("--skip-molecules", action="store_true",
                        help="skip the chemical LM's molecule phase (embedded:smiles-clm on a PMO oracle)")
    parser.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    parser.set_defaults(func=run_demo)
