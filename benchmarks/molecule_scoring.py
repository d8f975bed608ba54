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
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (or the platform string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _median_rate(run: Callable[[], int], repeats: int) -> float:
    """Median over `repeats` runs of (items processed / seconds); `run` returns its item count."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        items = run()
        rates.append(items / (time.perf_counter() - start))
    return statistics.median(rates)


def _stream(molecules: list[str], n: int, repeat_rate: float, seed: int) -> list[str]:
    """`n` samples: each repeats a uniformly drawn earlier sample with probability `repeat_rate`."""
    rng = random.Random(seed)
    fresh = iter(molecules)
    stream: list[str] = []
    for _ in range(n):
        stream.append(rng.choice(stream) if stream and rng.random() < repeat_rate else next(fresh))
    return stream


def _pool_rate(oracle: Callable[[str], float], molecules: list[str], workers: int) -> float:
    """Molecules per second through a started process pool (worker start-up and warm-up excluded)."""
    from divrl.tasks.molecules.scoring import CachedScorer

    with CachedScorer(oracle, workers=workers, pool_threshold=1) as scorer:
        warm_up = 4 * workers * scorer.chunk_size  # every worker starts and loads RDKit's SA table
        scorer.score(molecules[:warm_up])
        start = time.perf_counter()
        scorer.score(molecules[warm_up:])
        return (len(molecules) - warm_up) / (time.perf_counter() - start)


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

    from divrl.tasks.molecules.chem import parse_smiles
    from divrl.tasks.molecules.data import reference_smiles
    from divrl.tasks.molecules.rewards import MPO, HBDStep, normalised_sa, qed
    from divrl.tasks.molecules.scoring import CachedScorer
    from rdkit import Chem

    pool = reference_smiles()
    random.Random(args.seed).shuffle(pool)
    cold = pool[: args.molecules]
    mols = [Chem.MolFromSmiles(s) for s in cold]
    mpo = MPO()
    mpo(cold[0])  # load the SA fragment table outside the timings
    results: dict[str, float] = {}

    def per_item(fn: Callable, items: list) -> Callable[[], int]:
        return lambda: sum(1 for item in items if fn(item) is not None)

    results["parse_per_s"] = _median_rate(per_item(parse_smiles, cold), args.repeats)
    results["qed_per_s"] = _median_rate(per_item(qed, mols), args.repeats)
    results["sa_per_s"] = _median_rate(per_item(normalised_sa, mols), args.repeats)
    results["hbd_per_s"] = _median_rate(per_item(HBDStep(3), mols), args.repeats)
    results["mpo_uncached_per_s"] = _median_rate(per_item(mpo, cold), args.repeats)

    def cold_run() -> int:
        _canonical_key.cache_clear()  # cold: no string seen before
        return len(CachedScorer(mpo).score(cold))

    results["cached_cold_per_s"] = _median_rate(cold_run, args.repeats)

    stream = _stream(pool, args.molecules, args.repeat_rate, args.seed)
    batches = [stream[i : i + args.batch_size] for i in range(0, len(stream), args.batch_size)]

    def stream_cached() -> int:
        _canonical_key.cache_clear()
        scorer = CachedScorer(mpo)
        return sum(len(scorer.score(batch)) for batch in batches)

    def stream_uncached() -> int:
        return sum(len([mpo(s) for s in batch]) for batch in batches)

    results["stream_repeat_rate_measured"] = 1 - len(set(stream)) / len(stream)
    results["stream_cached_per_s"] = _median_rate(stream_cached, args.repeats)
    results["stream_uncached_per_s"] = _median_rate(stream_uncached, args.repeats)
    results["stream_cache_speedup"] = results["stream_cached_per_s"] / results["stream_uncached_per_s"]

    warm = CachedScorer(mpo)
    warm.score(cold)
    results["all_hits_per_s"] = _median_rate(lambda: len(warm.score(cold)), args.repeats)
    results["all_hits_speedup"] = results["all_hits_per_s"] / results["mpo_uncached_per_s"]

    if args.workers > 1:
        results[f"pool_{args.workers}_workers_per_s"] = statistics.median(
            _pool_rate(mpo, cold, args.workers) for _ in range(args.repeats)
        )

    machine = {
        "nproc": os.cpu_count(),
        "cpu": _cpu_model(),
        "python": platform.python_version(),
        "rdkit": Chem.rdBase.rdkitVersion,
        "load_average_1min_at_end": os.getloadavg()[0],
    }
    record = {
        "script": "benchmarks/molecule_scoring.py",
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
    rows = [
        ("parse SMILES (RDKit)", r["parse_per_s"]),
        ("QED", r["qed_per_s"]),
        ("normalised SA", r["sa_per_s"]),
        ("HBD step", r["hbd_per_s"]),
        ("MPO (QED, SA, HBD), no cache", r["mpo_uncached_per_s"]),
        (f"cached scorer, cold ({c['molecules']} distinct molecules)", r["cached_cold_per_s"]),
        (
            f"stream, {r['stream_repeat_rate_measured']:.0%} repeats, batches of {c['batch_size']}, no cache",
            r["stream_uncached_per_s"],
        ),
        (f"stream, {r['stream_repeat_rate_measured']:.0%} repeats, with cache", r["stream_cached_per_s"]),
        ("same batch again (all cache hits)", r["all_hits_per_s"]),
    ]
    rows += [(f"process pool, {k.split('_')[1]} workers, cold", v) for k, v in r.items() if k.startswith("pool_")]
    table = "\n".join(f"| {name} | {rate:,.0f} |" for name, rate in rows)
    return f"""## Molecule scoring (`benchmarks/molecule_scoring.py`)

Molecules scored per second on one core (single process; median of {c["repeats"]} runs), molecules drawn
from the SMILES files shipped with RDKit.

| scenario | molecules / s |
|---|---|
{table}

Cache speedup: {r["stream_cache_speedup"]:.2f}x on the stream with {r["stream_repeat_rate_measured"]:.0%} repeats,
{r["all_hits_speedup"]:.1f}x when a batch is scored again (all hits vs the uncached MPO).

Machine: {m["nproc"]} cores ({m["cpu"]}), Python {m["python"]}, RDKit {m["rdkit"]}; {record["date"]};
1-minute load average when the run ended: {m["load_average_1min_at_end"]:.1f} (above 1 means other jobs
shared the cores, so absolute rates are lower bounds; the speedups compare runs made side by side).
"""


if __name__ == "__main__":
    main()
