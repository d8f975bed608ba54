"""Each method's step time relative to vanilla TRL before and after a code change, from two runs of
`benchmarks/micro/trainer_overhead.py` (one per code tree, the same settings): issue 30 asks that the method-registry
redesign leaves no method slower. A ratio to vanilla GRPO is measured inside its own run (interleaved rounds, the
same machine load), so the two runs' ratios compare even when the machine's load differs between them.

    python benchmarks/micro/overhead_compare.py --before trainer_overhead_issue30_before \
        --after trainer_overhead_issue30_after --before-commit 064a9c6 --after-commit <sha>

Writes benchmarks/results/<--name>.json and .md (default trainer_overhead_issue30).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
RESULTS = BENCHMARKS / "results"


def _ratio(row: dict, clock: str) -> str:
    part = row[clock]
    return f"{part['ratio']:.3f} ({part['ci95'][0]:.3f}-{part['ci95'][1]:.3f})"


def compare(before: dict, after: dict) -> list[dict]:
    """Per trainer: CPU ratio to its vanilla baseline before and after, and after / before."""
    rows_before = {row["trainer"]: row for row in before["rows"]}
    rows = []
    for row in after["rows"]:
        old = rows_before.get(row["trainer"])
        if old is None:
            continue
        rows.append({"trainer": row["trainer"], "baseline": row["baseline"], "before": old["cpu"], "after": row["cpu"],
                     "change": row["cpu"]["ratio"] / old["cpu"]["ratio"],
                     "after_above_before_interval": row["cpu"]["ratio"] > old["cpu"]["ci95"][1]})
    return rows


def markdown(rows: list[dict], args: argparse.Namespace, before: dict, after: dict) -> str:
    lines = [
        "## Trainer overhead before and after the method-registry redesign (issue 30, "
        "`benchmarks/micro/overhead_compare.py`)",
        "",
        f"Two runs of `benchmarks/micro/trainer_overhead.py` with the same settings ({before['config'].get('rounds')} "
        f"interleaved rounds, CPU, 1 torch thread, no memory probes): before = the code at `{args.before_commit}`, "
        f"after = the code at `{args.after_commit}`. Each cell is a method's process-CPU step time divided by vanilla "
        "TRL GRPO's in the same run (geometric mean over rounds, 95% bootstrap interval); `change` = after / before. "
        "A method is slower after the change only if its after ratio lies above the before interval.",
        "",
        "| trainer | baseline | CPU ratio before | CPU ratio after | change | slower? |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(f"| {row['trainer']} | {row['baseline']} | {_ratio(row, 'before')} | {_ratio(row, 'after')} | "
                     f"{row['change']:.3f} | {'yes' if row['after_above_before_interval'] else 'no'} |")
    lines += ["", f"Runs: before {before['date']} ({before['elapsed_s']:.0f} s), after {after['date']} "
              f"({after['elapsed_s']:.0f} s); machine {after['machine']}.", ""]
    if args.conditions:
        lines += [f"Conditions: {args.conditions}", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="results stem of the run on the old code")
    parser.add_argument("--after", required=True, help="results stem of the run on the new code")
    parser.add_argument("--before-commit", required=True)
    parser.add_argument("--after-commit", required=True)
    parser.add_argument("--name", default="trainer_overhead_issue30")
    parser.add_argument("--conditions", default="", help="what else the machine ran meanwhile (printed as given)")
    args = parser.parse_args()
    before = json.loads((RESULTS / f"{args.before}.json").read_text())
    after = json.loads((RESULTS / f"{args.after}.json").read_text())
    rows = compare(before, after)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(
        {"before": args.before, "after": args.after, "before_commit": args.before_commit,
         "after_commit": args.after_commit, "rows": rows}, indent=1))
    text = markdown(rows, args, before, after)
    (RESULTS / f"{args.name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
