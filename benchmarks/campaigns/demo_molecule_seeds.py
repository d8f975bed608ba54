"""The demo's molecule phase with 10 seeds: the known spread one `make demo` run's molecule table is read against.

Runs the molecule phase's three arms (`divrl.tasks.molecules.clm_demo`: sampling `embedded:smiles-clm`, GRPO and
IPS-GRPO behind a Murcko bucket-10 filter, clm_demo.BUDGET calls of PMO's albuterol_similarity each) for seeds 0 to 9
(the demo runs clm_demo.SEEDS of them), one seed after another in this process. It resumes: each seed's oracle-call
histories, Yield and the commit it ran at go to benchmarks/evidence/demo_molecule_seeds/budgetB/seedS.json (B: the
budget) as it ends (commit them), and a seed whose file exists is not run again. It then writes
results/demo_molecule_seeds.json (which the demo's report reads) and results/demo_molecule_seeds.md: per arm the
mean Yield over seeds with a Student-t 95% interval (df = seeds - 1) and the range, and the seed-paired differences
GRPO - sampling, IPS - sampling and IPS - GRPO.

    python benchmarks/campaigns/demo_molecule_seeds.py [--seeds 0 1 ... 9] [--report-only] [--state DIR] [--results DIR]
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
sys.path.insert(0, str(BENCHMARKS / "campaigns"))
from demo_seeds import git_commit, seeds_parser, write_results  # noqa: E402
from intervals import seed_summary  # noqa: E402
from machine import cpu_model  # noqa: E402

from divrl.tasks.molecules import clm_demo  # noqa: E402
from divrl.tasks.molecules.metrics import generative_yield  # noqa: E402

STATE = BENCHMARKS / "evidence" / "demo_molecule_seeds"
SEEDS = list(range(10))


def run_seed(state: Path, seed: int) -> dict[str, Any]:
    """Run (or reuse) one seed's three arms; its record: settings, commit, thread count, seconds, Yield, histories."""
    path = state / f"seed{seed}.json"
    if path.is_file():
        return json.loads(path.read_text())
    print(f"molecule phase, seed {seed} -> {path}", flush=True)
    commit, began = git_commit(), time.perf_counter()
    with tempfile.TemporaryDirectory() as out:  # the trained arms' run folders: nothing in them is kept
        histories = clm_demo.run_seed(seed, Path(out), progress=lambda line: print(line, flush=True))
    import torch

    record = {"seed": seed, "settings": clm_demo.settings(), "commit": commit, "torch_threads": torch.get_num_threads(),
              "seconds": round(time.perf_counter() - began, 1),
              "yield": {arm: generative_yield(history, clm_demo.TAU) for arm, history in histories.items()},
              "histories": {arm: [[smiles, score] for smiles, score in history] for arm, history in histories.items()}}
    state.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record))
    os.replace(temporary, path)  # a seed file is whole or absent
    return record


def summarise(records: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per arm: Yield's t-interval over seeds and range; per pair in `clm_demo.PAIRS`: the same of the seed-paired
    difference."""
    differing = sorted(seed for seed, record in records.items() if record["settings"] != clm_demo.settings())
    if differing:
        raise SystemExit(f"demo_molecule_seeds: seed(s) {differing} ran with other settings than clm_demo's now "
                         f"({clm_demo.settings()}); move their files away and rerun them")
    yields = {arm: [record["yield"][arm] for record in records.values()] for arm in clm_demo.ARMS}
    return {"settings": clm_demo.settings(), "seeds": list(records),
            "arms": {arm: seed_summary(values) for arm, values in yields.items()},
            "paired": {f"{a} - {b}": seed_summary([x - y for x, y in zip(yields[a], yields[b], strict=True)])
                       for a, b in clm_demo.PAIRS}}


def markdown(doc: dict[str, Any]) -> str:
    """results/demo_molecule_seeds.md: the settings, one row per arm and per paired difference."""
    lines = ["## The demo's molecule phase with several seeds (`benchmarks/campaigns/demo_molecule_seeds.py`)", "",
             f"Seeds {', '.join(map(str, doc['seeds']))}, commit {doc['commit']}, {doc['date']}, {doc['cores']} "
             f"cores ({doc['cpu']}), torch threads {doc['torch_threads']}. Settings: `{json.dumps(doc['settings'])}`. "
             "Yield: distinct molecules above tau within the budget. Interval: Student-t 95% over seeds "
             "(df = seeds - 1); range: lowest and highest seed.", "",
             "| Yield | mean [95% t-interval] | range | per seed |", "|---|---|---|---|"]
    rows = [*doc["arms"].items(), *((f"{pair} (paired)", s) for pair, s in doc["paired"].items())]
    for label, s in rows:
        lines.append(f"| {label} | {s['mean']:.2f} [{s['ci_low']:.2f}, {s['ci_high']:.2f}] | {s['min']:g} to "
                     f"{s['max']:g} | {', '.join(f'{v:g}' for v in s['values'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    state_help = f"the seeds' files (default {STATE}/budgetB, B the molecule phase's oracle budget)"
    args = seeds_parser(__doc__.splitlines()[0], SEEDS, None, state_help).parse_args()
    args.state = args.state or STATE / f"budget{clm_demo.BUDGET}"
    if not args.report_only:
        from divrl.cpu_threads import use_free_cores

        use_free_cores()
    records = {seed: run_seed(args.state, seed) for seed in args.seeds
               if not args.report_only or (args.state / f"seed{seed}.json").is_file()}
    if not records:
        raise SystemExit(f"demo_molecule_seeds: no seed has run yet in {args.state}")
    doc = {**summarise(records), "commit": ", ".join(sorted({r["commit"] for r in records.values()})),
           "torch_threads": ", ".join(sorted({str(r["torch_threads"]) for r in records.values()})),
           "cpu": cpu_model(), "cores": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    write_results(args.results, "demo_molecule_seeds", doc, markdown(doc))


if __name__ == "__main__":
    main()
