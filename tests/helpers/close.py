"""One comparison for numbers recorded in a file and for the states of two runs: floats within a stated tolerance,
everything else (integers, names, shapes, dtypes, discrete outcomes) exactly.

Why recorded floats need a tolerance: torch picks its CPU kernels at run time by the CPU's instruction set (AVX-512,
AVX2, the portable default, ARM's), and each kernel adds float32 numbers in its own order, so two machines give the
same training steps up to the last bits and a file recorded on one machine is not bit-identical on another. Within
one machine and thread count the kernels and their order are fixed: there `EXACT` is right, e.g. for a resumed run
against an uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Tolerance:
    """A float `actual` matches `expected` when |actual - expected| <= abs + rel * |expected|."""

    rel: float
    abs: float


EXACT = Tolerance(rel=0.0, abs=0.0)
# What the forward and backward passes compute (rewards, advantages, loss, gradient norm, method state): kernel paths
# differ by a few float32 ulps (1 ulp = 1.2e-7 relative; measured at most 2.2e-6 relative over the golden cases with
# ATEN_CPU_CAPABILITY=default and 4.6e-7 with avx2, against AVX-512). The floor is for values that are rounding
# residue themselves (a population soup's reconstruction error of ~2e-7), whose relative difference means nothing.
NUMBERS = Tolerance(rel=1e-5, abs=1e-6)
# Weights after Adam steps: Adam divides each gradient element by its own running magnitude, so an element whose
# gradient is rounding noise (|g| ~ 1e-8, Adam's epsilon) moves by up to the learning rate in either direction,
# and by a different amount on another kernel path (measured: one element of 128 moved 0.0055 the other way, the
# tensor's norm 5.8e-4 relative; elementwise after a resume at most 8e-7). A real change moves the weights by
# about the learning rate (1e-2 in these runs) nearly everywhere.
WEIGHTS = Tolerance(rel=2e-3, abs=1e-4)
# The parts of a trained state (golden_methods' method_state, checkpoint_kill_script.final_state) that are weights.
WEIGHT_PARTS: Mapping[str, Tolerance] = {"lora": WEIGHTS, "log_z": WEIGHTS}


def assert_close(actual: Any, expected: Any, where: str = "", tol: Tolerance = NUMBERS,
                 parts: Mapping[str, Tolerance] | None = None) -> None:
    """Assert `actual` matches `expected` (nested dicts, lists, tensors, scalars): floats within `tol`, anything
    else equal; a dict entry named in `parts` is compared with that tolerance instead. The message names the first
    place that differs."""
    parts = parts or {}
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{where}: {type(actual).__name__} where a tensor was expected"
        assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), \
            f"{where}: {tuple(actual.shape)} {actual.dtype} != {tuple(expected.shape)} {expected.dtype}"
        if expected.is_floating_point():
            differ = ~torch.isclose(actual, expected, rtol=tol.rel, atol=tol.abs, equal_nan=True)
        else:
            differ = actual != expected
        if differ.any():
            gap = (actual.double() - expected.double()).abs()[differ].max().item()
            raise AssertionError(f"{where}: {int(differ.sum())} of {expected.numel()} values differ (largest "
                                 f"|difference| {gap:.3g}; allowed {tol.abs} + {tol.rel} x |expected|)")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), \
            f"{where}: keys {sorted(map(str, actual)) if isinstance(actual, dict) else actual!r} != " \
            f"{sorted(map(str, expected))}"
        for key in expected:
            assert_close(actual[key], expected[key], f"{where}/{key}", parts.get(key, tol), parts)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), \
            f"{where}: {actual!r} != {expected!r}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, f"{where}[{i}]", tol, parts)
    elif isinstance(expected, float):
        assert isinstance(actual, (int, float)) and not isinstance(actual, bool), f"{where}: {actual!r} != {expected!r}"
        assert actual == expected or abs(actual - expected) <= tol.abs + tol.rel * abs(expected), \
            f"{where}: {actual!r} != {expected!r} (allowed {tol.abs} + {tol.rel} x |expected|)"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"
