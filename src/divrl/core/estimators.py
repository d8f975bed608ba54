"""Order-free (unbiased) estimators of "found within n samples" from N samples drawn once.

One estimator serves every "at least one hit among n draws" metric: pass@k (Chen et al. 2021, with c = the
number of successful samples) and the order-free recovery curve (per admissible hypothesis h, c = the number of
samples equal to h). Given N samples of which c are hits, the probability that n of them drawn without
replacement contain at least one hit is

    P(N, c, n) = 1 - C(N - c, n) / C(N, n) = 1 - prod_{i=0}^{n-1} (N - c - i) / (N - i),

the average of "hit within the first n" over every ordering of the N samples, so no single ordering decides
it. The product form has every factor in [0, 1] (no huge binomials, no cancellation); a factor reaches 0
once n > N - c, where P = 1 exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Hashable, Sequence


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return value


def hit_probability_curve(samples: int, hits: int, up_to: int | None = None) -> list[float]:
    """P(at least one hit among n of `samples` drawn without replacement), for n = 1..up_to (default `samples`).

    `hits` of the `samples` are hits. Entry n-1 is 1 - C(samples - hits, n) / C(samples, n), computed as a
    running product of (samples - hits - i) / (samples - i). ValueError for samples < 1, hits outside
    [0, samples], or up_to outside [0, samples] (n > N samples cannot be drawn without replacement).
    """
    samples, hits = _check_int("samples", samples), _check_int("hits", hits)
    up_to = samples if up_to is None else _check_int("up_to", up_to)
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not 0 <= hits <= samples:
        raise ValueError(f"hits must be in [0, samples={samples}], got {hits}")
    if not 0 <= up_to <= samples:
        raise ValueError(f"cannot estimate n = {up_to} from {samples} samples: n must be in [0, {samples}] "
                         "(draws are without replacement)")
    curve, miss = [], 1.0  # miss = P(no hit among the first i draws)
    for i in range(up_to):
        miss *= max(samples - hits - i, 0) / (samples - i)
        curve.append(1.0 - miss)
    return curve


def hit_probability(samples: int, hits: int, draws: int) -> float:
    """P(at least one hit among `draws` of `samples` drawn without replacement) = 1 - C(N-c, n) / C(N, n).

    This is the unbiased pass@k estimator (samples = N, hits = c correct, draws = k); 0.0 for draws = 0.
    ValueError for draws > samples or the other invalid inputs of `hit_probability_curve`.
    """
    curve = hit_probability_curve(samples, hits, draws)
    return curve[-1] if curve else 0.0


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021) from `samples` draws of which `correct` succeeded: `hit_probability`."""
    return hit_probability(samples, correct, k)


def mean_pass_at_k_curve(groups: Sequence[tuple[int, int]], up_to: int | None = None) -> list[float]:
    """pass@k for k = 1..up_to, averaged over groups of (samples, correct) (e.g. one group per prompt).

    `up_to` defaults to the smallest group's sample count (pass@k needs k <= N in every group).
    """
    if not groups:
        raise ValueError("pass@k needs at least one group of samples")
    up_to = min(samples for samples, _ in groups) if up_to is None else up_to
    curves = [hit_probability_curve(samples, correct, up_to) for samples, correct in groups]
    return [sum(values) / len(curves) for values in zip(*curves, strict=True)]


def expected_coverage_curve(
    keys: Sequence[Hashable | None], targets: Collection[Hashable], up_to: int | None = None
) -> list[float]:
    """Order-free coverage: for n = 1..up_to (default len(keys)), the expected fraction of `targets` that n of
    the samples `keys`, drawn without replacement, contain; i.e. mean over targets t of
    `hit_probability_curve(len(keys), #{keys == t}, up_to)` (targets never sampled contribute 0).

    With targets = an admissible set H_O and keys = the canonical proposals, this is the recovery curve RR(n)
    averaged over every ordering of the samples. At n = len(keys) it equals the plain coverage of all samples.
    """
    if not targets:
        raise ValueError("coverage needs a non-empty set of targets")
    if not keys:
        raise ValueError("coverage needs at least one sample")
    curve = [0.0] * len(hit_probability_curve(len(keys), 0, up_to))  # also checks up_to
    for count in Counter(k for k in keys if k is not None and k in targets).values():
        for i, p in enumerate(hit_probability_curve(len(keys), count, up_to)):
            curve[i] += p
    return [c / len(targets) for c in curve]


def uniform_coverage_ceiling(samples: int, hits: int, targets: int, draws: int) -> float:
    """The coverage `draws` samples would reach if the policy's hit mass were spread evenly over `targets` targets.

    With hit rate v (a sample lands on some target), coverage of n iid draws is mean_t 1 - (1 - p_t)^n, concave in
    each p_t, so for a fixed v no policy expects more than the even spread's 1 - (1 - v/k)^n: a recovery-rate
    ceiling set by validity alone. Estimated without bias from `hits` of `samples`: n of the samples drawn without
    replacement hold m hits (hypergeometric), each of which would miss a given target with probability 1 - 1/k,
    so the estimate is 1 - E[(1 - 1/k)^m]. With one target it is `hit_probability(samples, hits, draws)`.
    ValueError for targets < 1 or the invalid inputs of `hit_probability_curve`.
    """
    hit_probability_curve(samples, hits, draws)  # checks samples, hits and draws
    targets = _check_int("targets", targets)
    if targets < 1:
        raise ValueError(f"targets must be >= 1, got {targets}")
    # hypergeometric weights in log space: exact big-integer binomials cost seconds at thousands of samples
    log_total = _log_comb(samples, draws)
    miss = sum(math.exp(_log_comb(hits, m) + _log_comb(samples - hits, draws - m) - log_total) * (1 - 1 / targets) ** m
               for m in range(max(0, draws - (samples - hits)), min(hits, draws) + 1))
    return 1.0 - miss


def _log_comb(n: int, r: int) -> float:
    """log C(n, r) for 0 <= r <= n."""
    return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)
