"""The demo's own settings with 5 seeds: the known spread one `make demo` run is read against.

Runs `divrl demo --skip-toy --seed S` (defaults otherwise: embedded Gemma-3-270M, GRPO and IPS-GRPO on HypoSpace
Boolean) for S = 42 (the demo's default) to 46 into benchmarks/evidence/demo_seeds/seedS, one after another. It
resumes: a seed whose held_out.json exists is done. It then writes results/demo_seeds.json (which the demo's report
reads) and results/demo_seeds.md: per model and metric the mean over seeds with a Student-t 95% interval (df =
seeds - 1) and the range, and IPS - GRPO paired by seed. Commit each seed's small files (held_out.json, report.md,
eval/recovery.json with every sample, the methods' metrics.jsonl) as it lands; the adapters stay uncommitted.

    python benchmarks/campaigns/demo_seeds.py [--seeds 42 43 44 45 46] [--report-only] [--state DIR] [--results DIR]

Run it from a worktree at a fixed commit (with --state and --results in the main checkout) when the code may
change meanwhile; each seed records the commit it ran at.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from intervals import seed_summary  # noqa: E402
from machine import cpu_model  # noqa: E402

ROOT = BENCHMARKS.parent
STATE = BENCHMARKS / "evidence" / "demo_seeds"
RESULTS = BENCHMARKS / "results"
SEEDS = [42, 43, 44, 45, 46]
PAIRS = [("ips", "grpo")]


def git_commit() -> str:
    """The checkout's commit, '+dirty' when tracked files differ from it."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "-uno") else ""
    return (git("rev-parse", "--short", "HEAD") or "unknown") + dirty


def run_seed(state: Path, seed: int) -> dict[str, Any]:
    """Run (or reuse) one seed's demo; its held_out.json document, with the commit it ran at."""
    out = state / f"seed{seed}"
    done = out / "held_out.json"
    if not done.is_file():
        print(f"demo seed {seed} -> {out}", flush=True)
        commit = git_commit()
        subprocess.run([sys.executable, "-m", "divrl.cli", "demo", "--skip-toy", "--seed", str(seed),
                        "--out", str(out)],
                       cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=True)
        done.write_text(json.dumps({**json.loads(done.read_text()), "commit": commit}, indent=1))
    return json.loads(done.read_text())


def summarise(runs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per model and metric: t-interval over seeds plus range; per pair: the same of the seed-paired difference."""
    settings = {json.dumps(run["settings"], sort_keys=True) for run in runs.values()}
    if len(settings) != 1:
        raise SystemExit(f"demo_seeds: the seeds ran with different settings ({sorted(settings)}); rerun them")

    first = next(iter(runs.values()))
    models = {model: {metric: seed_summary([run["models"][model][metric] for run in runs.values()])
                      for metric in first["models"][model]} for model in first["models"]}
    paired = {f"{a} - {b}": {metric: seed_summary([run["models"][a][metric] - run["models"][b][metric]
                                           for run in runs.values()]) for metric in ("validity", "rr")}
              for a, b in PAIRS}
    return {"settings": first["settings"], "seeds": list(runs), "models": models, "paired": paired}


def markdown(doc: dict[str, Any]) -> str:
    """results/demo_seeds.md: the settings, then one row per model and metric and per paired difference."""
    lines = ["## The demo's settings with several seeds (`benchmarks/campaigns/demo_seeds.py`)", "",
             f"`divrl demo --skip-toy --seed S` for S in {', '.join(map(str, doc['seeds']))}, commit {doc['commit']}, "
             f"{doc['date']}, {doc['cores']} cores ({doc['cpu']}). Settings: `{json.dumps(doc['settings'])}`. "
             "Interval: Student-t 95% over seeds (df = seeds - 1); range: lowest and highest seed.", "",
             "| model | metric | mean [95% t-interval] | range | per seed |", "|---|---|---|---|---|"]
    for model, metrics in doc["models"].items():
        for metric, s in metrics.items():
            lines.append(f"| {model} | {metric} | {s['mean']:.3f} [{s['ci_low']:.3f}, {s['ci_high']:.3f}] | "
                         f"{s['min']:.3f} to {s['max']:.3f} | {', '.join(f'{v:.3f}' for v in s['values'])} |")
    for pair, metrics in doc["paired"].items():
        for metric, s in metrics.items():
            lines.append(f"| {pair} (paired) | {metric} | {s['mean']:+.3f} [{s['ci_low']:+.3f}, {s['ci_high']:+.3f}] | "
                         f"{s['min']:+.3f} to {s['max']:+.3f} | {', '.join(f'{v:+.3f}' for v in s['values'])} |")
    return "\n".join(lines) + "\n"


def seeds_parser(description: str, seeds: list[int], state: Path | None, state_help: str) -> argparse.ArgumentParser:
    """The command line of a multi-seed run of one demo phase: --seeds, --report-only, --state, --results."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seeds", type=int, nargs="+", default=seeds,
                        help=f"seeds (default {seeds[0]} to {seeds[-1]})")
    parser.add_argument("--report-only", action="store_true", help="summarise the seeds already run; run none")
    parser.add_argument("--state", type=Path, default=state, help=state_help)
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"results folder (default {RESULTS})")
    return parser


def write_results(results: Path, name: str, doc: dict[str, Any], text: str) -> None:
    """RESULTS/NAME.json and NAME.md, and the table on stdout."""
    results.mkdir(exist_ok=True)
    (results / f"{name}.json").write_text(json.dumps(doc, indent=1))
    (results / f"{name}.md").write_text(text)
    print(text)


def main() -> None:
    args = seeds_parser(__doc__.splitlines()[0], SEEDS, STATE, f"the seeds' folders (default {STATE})").parse_args()
    runs = {}
    for seed in args.seeds:
        if args.report_only and not (args.state / f"seed{seed}" / "held_out.json").is_file():
            continue
        runs[seed] = run_seed(args.state, seed)
    if not runs:
        raise SystemExit(f"demo_seeds: no seed has run yet in {args.state}")
    commits = sorted({run["commit"] for run in runs.values()})
    doc = {**summarise(runs), "commit": ", ".join(commits), "cpu": cpu_model(), "cores": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    write_results(args.results, "demo_seeds", doc, markdown(doc))


if __name__ == "__main__":
    main()
