"""Interleaved step timing shared by the overhead benchmarks: per-step timers, rounds, ratio intervals.

Trainers live in one process and are visited in rounds, in a fresh random order each round, so slow
phases of a shared machine hit every trainer alike; each visit's first step (warm-up) is dropped.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

# Clocks every step is timed on: process CPU time (little disturbed by other load on a single-threaded CPU
# run) and wall time.
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def step_timer() -> tuple[Any, dict[str, list[float]]]:
    """A TrainerCallback appending each optimizer step's time per clock to the returned lists."""
    from transformers import TrainerCallback

    times: dict[str, list[float]] = {clock: [] for clock in CLOCKS}

    class Timer(TrainerCallback):
        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.start = {clock: read() for clock, read in CLOCKS.items()}

        def on_step_end(self, *_: Any, **__: Any) -> None:
            for clock, read in CLOCKS.items():
                times[clock].append(read() - self.start[clock])

    return Timer(), times


def interleaved_rounds(
    trainers: dict[str, Any],
    timers: dict[str, dict[str, list[float]]],
    rounds: int,
    reduce: Callable[[list[float]], float],
    seed: int = 0,
    after_visit: Callable[[str], None] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Per clock and trainer, `reduce` of each visit's step times (first step dropped), one value per round.

    `trainers[name].train()` runs one visit; `timers[name]` is its `step_timer` lists; `after_visit(name)`
    may collect more per-visit data.
    """
    rng = random.Random(seed)
    per_round: dict[str, dict[str, list[float]]] = {clock: {n: [] for n in trainers} for clock in CLOCKS}
    for round_index in range(rounds):
        order = list(trainers)
        rng.shuffle(order)
        for name in order:
            for clock in CLOCKS:
                timers[name][clock].clear()
            trainers[name].train()
            for clock in CLOCKS:
                per_round[clock][name].append(reduce(timers[name][clock][1:]))
            if after_visit is not None:
                after_visit(name)
        print(f"round {round_index + 1}/{rounds} (cpu s/step): " + ", ".join(
            f"{n} {per_round['cpu'][n][-1]:.3f}" for n in trainers), flush=True)
    return per_round


def geometric_ratio(ratios: list[float], seed: int = 0, resamples: int = 10_000) -> tuple[float, float, float]:
    """Geometric mean of per-round ratios and its 95% bootstrap (percentile) interval over rounds."""
    import numpy as np

    logs = np.log(np.asarray(ratios))
    rng = np.random.default_rng(seed)
    means = logs[rng.integers(0, len(logs), size=(resamples, len(logs)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(np.exp(logs.mean())), float(np.exp(low)), float(np.exp(high))
