"""Molecule scoring throughput on one core: cold, with a realistic repeat rate, and the cache's speedup.

Molecules come from the SMILES files shipped in the rdkit wheel (drug-like screening and ChEMBL
compounds). Scenarios, each timed `--repeats` times (median reported):
- per component: parse, QED, SA, HBD, the default MPO (QED x SA x HBD geometric mean);
- cold: N distinct molecules through a fresh `CachedScorer` (every one an oracle call);
- a stream of N samples in RL-sized batches where a fraction `--repeat-rate` repeats earlier samples,
  scored with the cache and without it (the MPO called on every sample);
- the same batch scored twice (the second pass all cache hits);
- optionally the process pool (`--workers`) on the cold set.
Writes benchmarks/results/molecule_scoring.json and .md.
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

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS))  # the shared modules at benchmarks/ (machine, timing, ...)
from machine import cpu_model  # noqa: E402

RESULTS = BENCHMARKS / "results"



def _interleaved_rates(runs: dict[str, Callable[[], int]], repeats: int, clock: Callable[[], float]) -> dict:
    """Per scenario, `repeats` rates (items per second of `clock`), the scenarios interleaved in each round
    so that paired scenarios see the same machine load; each run returns its item count."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = clock()
            items = run()
            rates[name].append(items / (clock() - start))
    return rates


def _paired_ratio(rates: dict[str, list[float]], numerator: str, denominator: str) -> float:
    """Median over rounds of rate[numerator] / rate[denominator] measured in the same round."""
    return statistics.median(a / b for a, b in zip(rates[numerator], rates[denominator], strict=True))


def _stream(molecules: list[str], n: int, repeat_rate: float, seed: int) -> list[str]:
    """`n` samples: each repeats a uniformly drawn earlier sample with probability `repeat_rate`."""
    rng = random.Random(seed)
    fresh = iter(molecules)
    stream: list[str] = []
    for _ in range(n):
        stream.append(rng.choice(stream) if stream and rng.random() < repeat_rate else next(fresh))
    return stream


def _pool_run(oracle: Callable[[str], float], molecules: list[str], workers: int) -> tuple[Callable[[], int], Any]:
    """A run scoring `molecules` through a started, warmed-up pool of `workers` processes, and its scorer."""
    from divrl.tasks.molecules.scoring import CachedScorer, canonical_key

    scorer = CachedScorer(oracle, workers=workers, pool_threshold=1)
    scorer.score(molecules[: 4 * workers * scorer.chunk_size])  # start every worker, load RDKit's SA table

    def run() -> int:
        canonical_key.cache_clear()
        scorer.cache.clear()
        return len(scorer.score(molecules))

    return run, scorer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--molecules", type=int, default=2000, help="distinct molecules in the cold set")
    parser.add_argument("--repeat-rate", type=float, default=0.5, help="fraction of stream samples that repeat")
    parser.add_argument("--batch-size", type=int, default=64, help="batch size of the streamed samples")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per scenario (median reported)")
    parser.add_argument("--workers", type=int, default=0, help="also time the process pool with this many workers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if not 0.0 <= args.repeat_rate < 1.0:
        parser.error("--repeat-rate must be in [0, 1)")

    from rdkit import Chem

    from divrl.tasks.molecules.chem import parse_smiles
    from divrl.tasks.molecules.data import reference_smiles
    from divrl.tasks.molecules.rewards import MPO, HBDStep, normalised_sa, qed
    from divrl.tasks.molecules.scoring import CachedScorer, canonical_key

    pool = reference_smiles()
    random.Random(args.seed).shuffle(pool)
    cold = pool[: args.molecules]
    mols = [Chem.MolFromSmiles(s) for s in cold]
    mpo = MPO()
    mpo(cold[0])  # load the SA fragment table outside the timings

    def per_item(fn: Callable, items: list) -> Callable[[], int]:
        return lambda: sum(1 for item in items if fn(item) is not None)

    def cached_cold() -> int:
        canonical_key.cache_clear()  # cold: no string seen before
        return len(CachedScorer(mpo).score(cold))

    stream = _stream(pool, args.molecules, args.repeat_rate, args.seed)
    batches = [stream[i : i + args.batch_size] for i in range(0, len(stream), args.batch_size)]

    def stream_cached() -> int:
        canonical_key.cache_clear()
        scorer = CachedScorer(mpo)
        return sum(len(scorer.score(batch)) for batch in batches)

    def stream_uncached() -> int:
        return sum(len([mpo(s) for s in batch]) for batch in batches)

    warm = CachedScorer(mpo)
    warm.score(cold)

    def all_hits() -> int:
        canonical_key.cache_clear()  # every input is canonicalised, then found in the cache
        return len(warm.score(cold))

    runs = {
        "parse": per_item(parse_smiles, cold),
        "qed": per_item(qed, mols),
        "sa": per_item(normalised_sa, mols),
        "hbd": per_item(HBDStep(3), mols),
        "mpo_uncached": per_item(mpo, cold),
        "cached_cold": cached_cold,
        "stream_uncached": stream_uncached,
        "stream_cached": stream_cached,
        "all_hits": all_hits,
    }
    rates = _interleaved_rates(runs, args.repeats, time.process_time)
    results: dict[str, float] = {f"{name}_per_cpu_s": statistics.median(r) for name, r in rates.items()}
    results["stream_repeat_rate_measured"] = 1 - len(set(stream)) / len(stream)
    results["stream_cache_speedup"] = _paired_ratio(rates, "stream_cached", "stream_uncached")
    results["stream_cache_speedup_rounds"] = [a / b for a, b in zip(rates["stream_cached"], rates["stream_uncached"])]
    results["cold_cache_relative_rate"] = _paired_ratio(rates, "cached_cold", "mpo_uncached")
    results["all_hits_speedup"] = _paired_ratio(rates, "all_hits", "mpo_uncached")

    if args.workers > 1:
        pool_run, pooled = _pool_run(mpo, cold, args.workers)
        wall = _interleaved_rates({"serial": per_item(mpo, cold), "pool": pool_run}, args.repeats, time.perf_counter)
        pooled.close()
        results["serial_wall_per_s"] = statistics.median(wall["serial"])
        results[f"pool_{args.workers}_workers_wall_per_s"] = statistics.median(wall["pool"])
        results["pool_speedup_wall"] = _paired_ratio(wall, "pool", "serial")

    machine = {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "rdkit": Chem.rdBase.rdkitVersion,
        "load_average_1min_at_end": os.getloadavg()[0],
    }
    record = {
        "script": "benchmarks/micro/molecule_scoring.py",
        "date": datetime.date.today().isoformat(),
        "machine": machine,
        "config": vars(args),
        "results": results,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "molecule_scoring.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "molecule_scoring.md").write_text(_markdown(record))
    print(json.dumps(results, indent=2))


def _markdown(record: dict) -> str:
    """The BENCHMARKS.md fragment: a table of throughputs and speedups, the machine and the date."""
    r, c, m = record["results"], record["config"], record["machine"]
    repeats = f"{r['stream_repeat_rate_measured']:.0%} repeats"
    ideal = 1 / (1 - r["stream_repeat_rate_measured"])
    low, high = min(r["stream_cache_speedup_rounds"]), max(r["stream_cache_speedup_rounds"])
    rows = [
        ("parse SMILES (RDKit)", r["parse_per_cpu_s"]),
        ("QED", r["qed_per_cpu_s"]),
        ("normalised SA", r["sa_per_cpu_s"]),
        ("HBD step", r["hbd_per_cpu_s"]),
        ("MPO (QED, SA, HBD), no cache", r["mpo_uncached_per_cpu_s"]),
        (f"cached scorer, cold ({c['molecules']} distinct molecules)", r["cached_cold_per_cpu_s"]),
        (f"stream with {repeats}, batches of {c['batch_size']}, no cache", r["stream_uncached_per_cpu_s"]),
        (f"stream with {repeats}, with cache", r["stream_cached_per_cpu_s"]),
        ("same batch again (all cache hits; each input still canonicalised)", r["all_hits_per_cpu_s"]),
    ]
    table = "\n".join(f"| {name} | {rate:,.0f} |" for name, rate in rows)
    pool = ""
    if "pool_speedup_wall" in r:
        workers = c["workers"]
        pool = (
            f"\nProcess pool, cold set, wall clock: serial {r['serial_wall_per_s']:,.0f}/s, {workers} workers "
            f"{r[f'pool_{workers}_workers_wall_per_s']:,.0f}/s ({r['pool_speedup_wall']:.2f}x); on a host whose "
            "cores are busy with other jobs the pool cannot gain, so read this against the load average below.\n"
        )
    return f"""## Molecule scoring (`benchmarks/micro/molecule_scoring.py`)

Molecules scored per CPU-second of one process (one core; median of {c["repeats"]} interleaved rounds;
CPU time, not wall time, so other jobs on the host slow it less), molecules drawn from the SMILES files
shipped with RDKit.

| scenario | molecules per CPU-second |
|---|---|
{table}

Cache speedup over the uncached MPO (median of per-round ratios): {r["stream_cache_speedup"]:.2f}x on the
stream with {repeats} (rounds: {low:.2f}x to {high:.2f}x; skipping the repeated oracle calls alone
predicts {ideal:.2f}x); {r["all_hits_speedup"]:,.1f}x when a batch is scored again
(each input still canonicalised for the key; exact repeats of recently seen strings skip even that through
a memo, so this is a lower bound). A cold cache runs at {r["cold_cache_relative_rate"]:.2f}x the uncached
rate (the price of canonicalising every input for the cache key).
{pool}
Machine: {m["nproc"]} cores ({m["cpu"]}), Python {m["python"]}, RDKit {m["rdkit"]}; {record["date"]};
1-minute load average when the run ended: {m["load_average_1min_at_end"]:.1f}.
"""


if __name__ == "__main__":
    main()
