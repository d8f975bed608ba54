"""HypoSpace verifier throughput: verifications per second on one core, per domain.

One verification = read a completion (parse + canonicalise; no eval) and look its canonical key up in the
instance's precomputed admissible set H_O (a frozenset). Completions are a realistic mix per domain, built
from the IPS-paper configurations (causal n=4, <=6 edges, 3 observations; voxel 3x3, height 3, 1-3
blocks; boolean AND/OR/NOT depth 2): exact-format valid answers, valid answers wrapped in prose and code
fences or written with other arrows/symbols, readable answers that are invalid for the instance, and
unreadable text. Rates are measured against the process's CPU time (single thread, so per core, and
little affected by other processes on a shared machine) and against wall time; the median of
`--repeats` rounds is reported, the domains interleaved in each round. The TRL reward function
(`validity_reward`, batches of 64 with the `hypotheses` column) is timed the same way.
Writes benchmarks/results/verifier_throughput.json and .md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from divrl.tasks.hypospace import BooleanTask, CausalTask, HypoSpaceTask, VoxelTask

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"
GOALS = {"causal": 100_000, "voxel": 100_000, "boolean": 20_000}
PROSE = [
    "I am not sure about this one.",
    "Let me think step by step about the observations.",
    "The answer cannot be determined.",
    "Sure! Here is a hypothesis that fits.",
]


def _variants(task: HypoSpaceTask, answer: str, rng: random.Random) -> str:
    """A valid answer as models write it: plain, after prose, in a code fence, or with other symbols."""
    style = rng.randrange(4)
    if style == 1:
        return f"{rng.choice(PROSE)}\n{answer}\nThis is consistent with every observation."
    if style == 2:
        return f"```\n{answer}\n```"
    if style == 3 and task.domain == "causal":
        return answer.replace("->", rng.choice([" → ", " => ", " -> "]))
    if style == 3 and task.domain == "boolean":
        return answer.replace(" AND ", " ∧ ").replace(" OR ", " ∨ ").replace("NOT ", "¬")
    return answer


def build_corpus(task: HypoSpaceTask, size: int, seed: int) -> list[tuple[str, frozenset[str], list[str]]]:
    """`size` (completion, H_O, hypotheses column) triples: 50% valid, 25% readable but invalid, 25% unreadable."""
    rng = random.Random(seed)
    instances = task.instances()
    corpus = []
    for k in range(size):
        instance = rng.choice(instances)
        kind = k % 4
        if kind in (0, 1):
            text = _variants(task, task.render_answer(rng.choice(instance.hypotheses)), rng)
        elif kind == 2:
            other = rng.choice([i for i in instances if not i.admissible & instance.admissible] or instances)
            text = task.render_answer(rng.choice(other.hypotheses))
        else:
            text = rng.choice(PROSE) + " " + task.answer_label + " " + rng.choice(PROSE)
        corpus.append((text, instance.admissible, list(instance.hypotheses)))
    rng.shuffle(corpus)
    return corpus


def _verify_all(task: HypoSpaceTask, corpus: list[tuple[str, frozenset[str], list[str]]]) -> int:
    parse = task.parse
    valid = 0
    for text, admissible, _ in corpus:
        valid += parse(text) in admissible
    return valid


def _reward_all(task: HypoSpaceTask, corpus: list[tuple[str, frozenset[str], list[str]]], batch: int = 64) -> float:
    (reward,) = task.reward_funcs()
    total = 0.0
    for start in range(0, len(corpus), batch):
        rows = corpus[start : start + batch]
        total += sum(reward([""] * len(rows), [r[0] for r in rows], hypotheses=[r[2] for r in rows]))
    return total



def measure(size: int, repeats: int, seed: int) -> dict[str, Any]:
    """Median rates per domain and scenario over `repeats` interleaved rounds."""
    tasks: dict[str, HypoSpaceTask] = {
        "causal": CausalTask(nodes=4, max_edges=6, observations=[3]),
        "voxel": VoxelTask(grid=3, max_height=3, max_blocks=3),
        "boolean": BooleanTask("extended", 2),
    }
    corpora = {name: build_corpus(task, size, seed) for name, task in tasks.items()}
    runs: dict[str, Callable[[], Any]] = {}
    for name, task in tasks.items():
        runs[f"{name}/verify"] = lambda t=task, c=corpora[name]: _verify_all(t, c)
        runs[f"{name}/reward"] = lambda t=task, c=corpora[name]: _reward_all(t, c)
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    wall: dict[str, list[float]] = {k: [] for k in runs}
    checks: dict[str, float] = {}
    for _ in range(repeats):
        for key, run in runs.items():
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            checks[key] = run()
            cpu[key].append(size / max(time.process_time() - start_cpu, 1e-9))
            wall[key].append(size / (time.perf_counter() - start_wall))
    domains = {}
    for name, task in tasks.items():
        verify, reward = f"{name}/verify", f"{name}/reward"
        domains[name] = {
            "params": task.params,
            "valid_fraction": checks[verify] / size,
            "verify_per_cpu_s": statistics.median(cpu[verify]),
            "verify_per_cpu_s_range": [min(cpu[verify]), max(cpu[verify])],
            "verify_per_wall_s": statistics.median(wall[verify]),
            "reward_per_cpu_s": statistics.median(cpu[reward]),
            "goal": GOALS[name],
            "meets_goal": statistics.median(cpu[verify]) >= GOALS[name],
        }
    return {
        "benchmark": "verifier_throughput",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            "nproc": os.cpu_count(),
            "cpu": cpu_model(),
            "python": platform.python_version(),
            "load_average": list(os.getloadavg()),
        },
        "completions_per_domain": size,
        "repeats": repeats,
        "domains": domains,
    }


def markdown(result: dict[str, Any]) -> str:
    """The `## ` fragment for BENCHMARKS.md."""
    machine = result["machine"]
    lines = [
        "## HypoSpace verifier throughput (`benchmarks/micro/verifier_throughput.py`)",
        "",
        "Verifications per second on one core: parse + canonicalise + lookup in the precomputed admissible set,",
        f"over {result['completions_per_domain']:,} completions per domain (50% valid answers, plain or wrapped in "
        "prose, fences or other symbols; 25% readable but invalid; 25% unreadable), median of "
        f"{result['repeats']} interleaved rounds. CPU-time rates (single thread) are little affected by other "
        "load; wall-clock rates are shown for comparison. `reward fn` times the TRL reward function "
        "(`validity_reward`, batches of 64, H_O from the `hypotheses` column).",
        "",
        "| domain | configuration | verifications / CPU-s (min-max) | / wall-s | reward fn / CPU-s | goal | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in result["domains"].items():
        low, high = d["verify_per_cpu_s_range"]
        config = ", ".join(f"{k}={v}" for k, v in d["params"].items())
        lines.append(
            f"| {name} | {config} | {d['verify_per_cpu_s']:,.0f} ({low:,.0f}-{high:,.0f}) | "
            f"{d['verify_per_wall_s']:,.0f} | {d['reward_per_cpu_s']:,.0f} | >= {d['goal']:,} | "
            f"{'yes' if d['meets_goal'] else 'no'} |"
        )
    load = ", ".join(f"{x:.1f}" for x in machine["load_average"])
    lines += [
        "",
        f"Machine: {machine['nproc']} cores ({machine['cpu']}), Python {machine['python']}, load average "
        f"{load} at the end of the run (shared machine: wall-clock rates are noisy). Date: {result['date']}.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000, help="completions per domain")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    result = measure(args.size, args.repeats, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verifier_throughput.json").write_text(json.dumps(result, indent=2) + "\n")
    fragment = markdown(result)
    (out / "verifier_throughput.md").write_text(fragment)
    print(fragment)


if __name__ == "__main__":
    main()
