"""Population-GRPO pieces (the execution-rewards paper): selection score, top-M selection, weight soups, restart noise.

Soups of LoRA adapters are taken in delta-W space (dW = s B A), never by averaging A and B separately,
which adds cross terms B_i A_j (see notes/lora-soups.md); the exact soup is then projected back to a
rank-r adapter by truncated SVD, whose relative error is the norm of the discarded singular values.
Restart noise is relative to the soup (`perturb_relative_`): each member restarts at relative distance sigma
from the soup's delta, in the toy's weights and in LoRA's delta-W alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import torch

from divrl.core._args import checked


@checked
def selection_scores(diversity: torch.Tensor, max_reward: torch.Tensor) -> torch.Tensor:
    """S_k = d_k (1 + max_i R_k(x_i)) for each member k."""
    diversity, max_reward = torch.as_tensor(diversity), torch.as_tensor(max_reward)
    if diversity.shape != max_reward.shape or diversity.dim() != 1:
        raise ValueError(
            f"diversity and max_reward must be 1-D of equal length, got {tuple(diversity.shape)} "
            f"and {tuple(max_reward.shape)}"
        )
    return diversity * (1.0 + max_reward)


@checked
def select_top(scores: torch.Tensor, m: int) -> list[int]:
    """Indices of the m highest scores, best first (ties: lower index first)."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be one per member (K,), got shape {tuple(scores.shape)}")
    if not 1 <= m <= scores.numel():
        raise ValueError(f"top-M must satisfy 1 <= M <= K={scores.numel()}, got M={m}")
    order = sorted(range(scores.numel()), key=lambda k: (-float(scores[k]), k))
    return order[:m]


def _normalised_weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if count < 1:
        raise ValueError("a soup needs at least one member")
    if weights is None:
        return [1.0 / count] * count
    if len(weights) != count or not all(0 <= w < math.inf for w in weights) \
            or sum(weights) <= 0:
        raise ValueError(f"soup weights must be {count} finite non-negative numbers with a positive sum, got {weights}")
    total = float(sum(weights))
    return [float(w) / total for w in weights]


@checked
def average_state_dicts(
    state_dicts: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float] | None = None
) -> dict[str, torch.Tensor]:
    """Weighted parameter average (weights normalised to sum 1); all members must share keys and shapes."""
    w = _normalised_weights(weights, len(state_dicts))
    keys = set(state_dicts[0])
    for i, sd in enumerate(state_dicts[1:], start=1):
        if set(sd) != keys:
            raise ValueError(f"member {i} has different parameter names than member 0: {sorted(set(sd) ^ keys)[:5]}")
    return {k: sum(wi * sd[k].detach().float() for wi, sd in zip(w, state_dicts)).to(state_dicts[0][k].dtype)
            for k in state_dicts[0]}


@checked
def lora_soup_delta(
    factors: Sequence[tuple[torch.Tensor, torch.Tensor, float]], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """Exact soup sum_i w_i s_i B_i A_i of LoRA factors (A: (r, in), B: (out, r), s = alpha / r)."""
    w = _normalised_weights(weights, len(factors))
    delta = None
    for wi, (lora_a, lora_b, scale) in zip(w, factors):
        if lora_b.shape[1] != lora_a.shape[0]:
            raise ValueError(f"LoRA B {tuple(lora_b.shape)} and A {tuple(lora_a.shape)} have mismatched ranks")
        term = (wi * scale) * (lora_b.detach().float() @ lora_a.detach().float())
        if delta is not None and term.shape != delta.shape:
            raise ValueError(f"members' delta shapes differ: {tuple(delta.shape)} vs {tuple(term.shape)}")
        delta = term if delta is None else delta + term
    assert delta is not None
    return delta


@checked
def project_to_rank(delta: torch.Tensor, rank: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Best rank-r factors (A (r, in), B (out, r)) with scale * B @ A ~= delta, and the relative Frobenius error.

    The error ||delta - scale B A|| / ||delta|| equals sqrt(sum of discarded sigma^2 / sum of all sigma^2).
    Ranks above min(out, in) are zero-padded (exact).
    """
    if rank < 1 or scale <= 0:
        raise ValueError(f"rank must be >= 1 and scale > 0, got rank={rank}, scale={scale}")
    if delta.dim() != 2 or not torch.isfinite(delta).all():
        raise ValueError(f"delta must be a finite (out, in) matrix, got shape {tuple(delta.shape)}"
                         + ("" if delta.dim() != 2 else " with NaN or inf entries"))
    u, s, vh = torch.linalg.svd(delta.float(), full_matrices=False)
    kept = min(rank, s.numel())
    total = float((s**2).sum())
    error = float((s[kept:] ** 2).sum() / total) ** 0.5 if total > 0 else 0.0
    root = (s[:kept] / scale).sqrt()
    lora_b = torch.zeros(delta.shape[0], rank)
    lora_a = torch.zeros(rank, delta.shape[1])
    lora_b[:, :kept] = u[:, :kept] * root
    lora_a[:kept] = root[:, None] * vh[:kept]
    return lora_a, lora_b, error


SoupBlock = torch.Tensor | tuple[torch.Tensor, torch.Tensor, float]


@torch.no_grad()
def perturb_relative_(blocks: Iterable[SoupBlock], sigma: float, generator: torch.Generator | None = None
                      ) -> list[float]:
    """Restart noise relative to the soup: move each block's delta by exactly sigma times its own norm.

    A block is either a tensor W, whose delta is W itself (the toy policies' weights), or LoRA factors
    (A (r, in), B (out, r), s), whose delta is dW = s B A. Gaussian noise G is drawn in the block's
    parameters (W, or A and B) and scaled by the step t > 0 that makes the delta move by exactly

        ||delta(params + t G) - delta(params)||_F = sigma ||delta(params)||_F,

    so a restart keeps every block at relative distance sigma from the soup, whatever the scale of its
    weights. For LoRA factors the delta moves by t s (G_B A + B G_A) + t^2 s G_B G_A: a rank-r update
    (no projection needed) that also gives rank slots a soup left empty (zero in A and B) small non-zero
    factors, so they can learn again. A zero delta (e.g. a fresh LoRA adapter, B = 0) is left unchanged.

    The execution-rewards paper adds N(0, sigma_p^2), sigma_p = 0.01, to every weight of a small MLP; on our
    reconstruction of
    that MLP (divrl.toy) this is 0.2-0.34 of a hidden layer's root-mean-square weight at the first soup.
    An absolute sigma does not carry over to LoRA factors, whose entries are orders of magnitude smaller
    (on a Gemma-3-4B-sized layer sigma = 0.01 moved dW by 77x its own norm). Blocks are modified in place
    (in their own dtype); returns the relative distance of each block (sigma, or 0.0 for a zero delta).
    """
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"perturbation sigma must be finite and >= 0, got {sigma}")
    distances = []
    for block in blocks:
        if isinstance(block, torch.Tensor):
            distances.append(_perturb_tensor_(block, sigma, generator))
        else:
            distances.append(_perturb_lora_(*block, sigma, generator))
    return distances


def _gaussian(like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Standard normal noise shaped like `like`, drawn on the CPU (reproducible on every device), in float32."""
    return torch.randn(like.shape, generator=generator, dtype=torch.float32, device="cpu").to(like.device)


def _perturb_tensor_(weight: torch.Tensor, sigma: float, generator: torch.Generator | None) -> float:
    noise = _gaussian(weight, generator)
    target = sigma * float(weight.detach().float().norm())
    if target == 0.0:
        return 0.0
    weight.add_((target / float(noise.norm()) * noise).to(weight.dtype))
    return sigma


def _perturb_lora_(lora_a: torch.Tensor, lora_b: torch.Tensor, scale: float, sigma: float,
                   generator: torch.Generator | None) -> float:
    noise_a, noise_b = _gaussian(lora_a, generator), _gaussian(lora_b, generator)
    a, b = lora_a.detach().float(), lora_b.detach().float()
    # Squared Frobenius norms and inner products of the rank-r products, from r x r Gram matrices (never out x in):
    # ||X Y||^2 = tr((X^T X)(Y Y^T)) and <X1 Y1, X2 Y2> = tr((X1^T X2)(Y2 Y1^T)).
    bb, bg, gg = b.T @ b, b.T @ noise_b, noise_b.T @ noise_b
    aa, ag, hh = a @ a.T, a @ noise_a.T, noise_a @ noise_a.T
    soup = float(torch.trace(bb @ aa)) * scale**2  # ||s B A||^2
    target = sigma**2 * soup
    if target == 0.0:
        return 0.0
    # delta(t) - delta(0) = t L + t^2 Q with L = s (G_B A + B G_A), Q = s G_B G_A.
    lin = scale**2 * float(torch.trace(gg @ aa) + torch.trace(bb @ hh) + 2 * torch.trace(bg.T @ ag.T))
    cross = scale**2 * float(torch.trace(gg @ ag.T) + torch.trace(bg @ hh))  # <L, Q>
    quad = scale**2 * float(torch.trace(gg @ hh))  # ||Q||^2
    step = _step_to_distance(lin, cross, quad, target)
    lora_a.add_((step * noise_a).to(lora_a.dtype))
    lora_b.add_((step * noise_b).to(lora_b.dtype))
    return sigma


def _step_to_distance(lin: float, cross: float, quad: float, target: float) -> float:
    """A t > 0 with t^2 lin + 2 t^3 cross + t^4 quad = target (= t^2 ||L + t Q||^2, >= 0), by bisection."""
    def moved(t: float) -> float:
        return t * t * (lin + 2 * t * cross + t * t * quad)

    high = math.sqrt(target / lin) if lin > 0 else 1.0
    while moved(high) < target:
        high *= 2
    low = 0.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if moved(mid) < target:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * high:
            break
    return high
