"""`divrl demo` (what `make demo` runs): GRPO vs IPS-GRPO on a real LLM, on the CPU, in minutes.

It drives the same entry points a user runs: prepares the embedded Gemma-3-270M, trains it briefly with
the CPU recipes `recipes/embedded-cpu/hypospace-voxel/{grpo,ips}.yaml` (`divrl train`), evaluates the
base model and both adapters with recovery curves on held-out instances (`divrl eval recovery`), and
writes `OUT/report.md` with the table and the curves. A demonstration of the pipeline, not a claim:
a few CPU steps barely move a model; see the README for the full-size GPU recipes.

Every phase runs in this one process, so the demo returns freed tensors to the system as it goes
(`divrl.memory`): without that, glibc's heap kept the largest phase's activations resident through all the
later ones (issue 12: about 10 GB during training and evaluation). Its peak RSS is in the report.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "embedded-cpu" / "hypospace-voxel"
VOXEL = {"grid": 3, "max_height": 3, "max_blocks": 3}  # the IPS paper's voxel setting


def _banner(step: int, total: int, text: str, start: float) -> None:
    print(f"\n[{step}/{total}] {text}  (elapsed {time.time() - start:.0f} s)", flush=True)


def _training_summary(run_dir: Path) -> dict[str, float]:
    """Mean reward and IPS distinct outcomes over the logged training steps of one run."""
    from divrl.analysis.runs import load_log_history, metric_series

    history = load_log_history(run_dir)
    summary = {}
    for key in ("reward", "ips/distinct_outcomes", "completions/mean_length"):
        values = [row[1] for row in metric_series(history, key)]
        if values:
            summary[key] = sum(values) / len(values)
    return summary


def write_report(out: Path, args: argparse.Namespace, timings: dict[str, float], peak_rss: int | None = None) -> Path:
    """`report.md`: recovery table (with 95% intervals), training summaries, timings and the curve plot."""
    recovery = json.loads((out / "eval" / "recovery.json").read_text())
    lines = [
        "# divrl demo: GRPO vs IPS-GRPO on HypoSpace voxels (CPU)",
        "",
        f"Model `{args.model}`, task hypospace-voxel {VOXEL}, {args.instances} instances split 50/50, "
        f"{args.steps} training steps per method (group size 8), recovery from {args.samples} parallel samples "
        f"per held-out instance. A pipeline demonstration: this budget is far too small to show the methods' "
        f"effect; run the GPU recipes for that.",
        "",
        "| model | validity | uniqueness | RR@N | 95% CI | distinct valid found |",
        "|---|---|---|---|---|---|",
    ]
    for model in recovery["models"]:
        rr, found = model["recovery"], model["distinct_valid"]["mean"][-1]
        lines.append(f"| {model['label']} | {model['validity']['mean']:.3f} | {model['uniqueness']['mean']:.3f} | "
                     f"{rr['mean']:.3f} | [{rr['ci_low']:.3f}, {rr['ci_high']:.3f}] | {found:.2f} |")
    lines += ["", "Training (means over logged steps):", "", "| method | reward | distinct outcomes per group | "
              "completion length |", "|---|---|---|---|"]
    for method in args.methods:
        s = _training_summary(out / method)
        lines.append(f"| {method} | {s.get('reward', float('nan')):.3f} | "
                     f"{s.get('ips/distinct_outcomes', float('nan')):.2f} | "
                     f"{s.get('completions/mean_length', float('nan')):.1f} |")
    lines += ["", "Wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())]
    if peak_rss is not None:
        lines += ["", f"Peak memory (resident set size of the demo process): {peak_rss / 1e9:.2f} GB"]
    lines += ["", "![recovery curves](eval/recovery.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


def run_demo(args: argparse.Namespace) -> int:
    """Prepare, train each method, evaluate all models, report; prints progress throughout."""
    from divrl.cli import main as divrl
    from divrl.memory import peak_rss_bytes, release_freed_memory, return_large_frees_to_os
    from divrl.models import resolve_model_name

    if not RECIPES.is_dir():
        raise SystemExit(f"divrl demo needs the repository's recipes/ folder ({RECIPES} not found): run it from a "
                         "source checkout (`make demo`)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return_large_frees_to_os()  # before the first large allocation: each phase's tensors go back when freed
    total = len(args.methods) + 3
    start = time.time()
    timings: dict[str, float] = {}
    _banner(1, total, f"preparing {args.model}", start)
    resolve_model_name(args.model)
    release_freed_memory()  # the conversion's copies (first use), before training
    timings["prepare"] = time.time() - start
    for i, method in enumerate(args.methods, start=2):
        _banner(i, total, f"training {method} for {args.steps} steps", start)
        t0 = time.time()
        code = divrl(["train", str(RECIPES / f"{method}.yaml"), "--model_name_or_path", args.model,
                      "--max_steps", str(args.steps), "--instance_limit", str(args.instances),
                      "--output_dir", str(out / method), "--logging_steps", "1", "--save_strategy", "no",
                      # the demo evaluates every model on held-out instances once training ends
                      "--recovery_eval", "false"])
        if code:
            return code
        release_freed_memory()  # the finished trainer and its model, before the next phase loads another
        timings[f"train {method}"] = time.time() - t0
    _banner(total - 1, total, f"recovery evaluation of base + {', '.join(args.methods)}", start)
    t0 = time.time()
    models = [arg for m in [args.model, *(str(out / m) for m in args.methods)] for arg in ("--model", m)]
    code = divrl(["eval", "recovery", *models, "--task", "hypospace-voxel", "--grid", str(VOXEL["grid"]),
                  "--max-height", str(VOXEL["max_height"]), "--max-blocks", str(VOXEL["max_blocks"]),
                  "--limit", str(args.instances), "--split", "test", "--samples", str(args.samples),
                  "--max-new-tokens", "80", "--out", str(out / "eval")])
    if code:
        return code
    timings["evaluate"] = time.time() - t0
    timings["total"] = time.time() - start
    _banner(total, total, "writing the report", start)
    print(f"wrote {write_report(out, args, timings, peak_rss_bytes())}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl demo`."""
    parser = subparsers.add_parser("demo", help="GRPO vs IPS-GRPO on the embedded LLM (CPU, minutes).")
    parser.add_argument("--model", default="embedded:gemma-3-270m", help="model to train (default: embedded)")
    parser.add_argument("--methods", nargs="+", default=["grpo", "ips"], choices=["grpo", "ips", "qd", "maxent",
                        "fkl", "js"], help="CPU recipes to train (default: grpo ips)")
    parser.add_argument("--steps", type=int, default=4, help="training steps per method (default 4)")
    parser.add_argument("--instances", type=int, default=8, help="instances before the 50/50 split (default 8)")
    parser.add_argument("--samples", type=int, default=8, help="samples per held-out instance (default 8)")
    parser.add_argument("--out", default="demo_out", help="output directory (default demo_out)")
    parser.set_defaults(func=run_demo)
