"""The benchmarks' one interval statistic: mean and Student-t interval over independent per-seed values."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def t_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> dict[str, Any]:
    """Mean and Student-t interval of independent per-seed values (df = seeds - 1); NaN bounds for one seed."""
    from scipy import stats

    array = np.asarray(values, dtype=float)
    mean = float(array.mean()) if len(array) else math.nan
    if len(array) < 2:
        return {"mean": mean, "ci_low": math.nan, "ci_high": math.nan, "n": len(array)}
    half = float(stats.t.ppf(0.5 + level / 2, len(array) - 1) * array.std(ddof=1) / math.sqrt(len(array)))
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": len(array)}


def seed_summary(values: Sequence[float]) -> dict[str, Any]:
    """`t_interval` of per-seed values with their range and the values themselves, as the results files keep them."""
    return {**t_interval(values), "min": float(np.min(values)), "max": float(np.max(values)), "values": list(values)}
