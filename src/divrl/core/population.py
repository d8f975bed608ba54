"""Population-GRPO pieces (seed 000): selection score, top-M selection, weight soups, perturbation.

Soups of LoRA adapters are taken in delta-W space (dW = s B A), never by averaging A and B separately,
which adds cross terms B_i A_j (see notes/lora-soups.md); the exact soup is then projected back to a
rank-r adapter by truncated SVD, whose relative error is the norm of the discarded singular values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch


def selection_scores(diversity: torch.Tensor, max_reward: torch.Tensor) -> torch.Tensor:
    """S_k = d_k (1 + max_i R_k(x_i)) for each member k."""
    diversity, max_reward = torch.as_tensor(diversity), torch.as_tensor(max_reward)
    if diversity.shape != max_reward.shape or diversity.dim() != 1:
        raise ValueError(
            f"diversity and max_reward must be 1-D of equal length, got {tuple(diversity.shape)} "
            f"and {tuple(max_reward.shape)}"
        )
    return diversity * (1.0 + max_reward)


def select_top(scores: torch.Tensor, m: int) -> list[int]:
    """Indices of the m highest scores, best first (ties: lower index first)."""
    scores = torch.as_tensor(scores)
    if not 1 <= m <= scores.numel():
        raise ValueError(f"top-M must satisfy 1 <= M <= K={scores.numel()}, got M={m}")
    order = sorted(range(scores.numel()), key=lambda k: (-float(scores[k]), k))
    return order[:m]


def _normalised_weights(weights: Sequence[float] | None, count: int) -> list[float]:
    if count < 1:
        raise ValueError("a soup needs at least one member")
    if weights is None:
        return [1.0 / count] * count
    if len(weights) != count or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"soup weights must be {count} non-negative numbers with a positive sum, got {weights}")
    total = float(sum(weights))
    return [float(w) / total for w in weights]


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


def project_to_rank(delta: torch.Tensor, rank: int, scale: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Best rank-r factors (A (r, in), B (out, r)) with scale * B @ A ~= delta, and the relative Frobenius error.

    The error ||delta - scale B A|| / ||delta|| equals sqrt(sum of discarded sigma^2 / sum of all sigma^2).
    Ranks above min(out, in) are zero-padded (exact).
    """
    if rank < 1 or scale <= 0:
        raise ValueError(f"rank must be >= 1 and scale > 0, got rank={rank}, scale={scale}")
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


@torch.no_grad()
def perturb_(tensors: Iterable[torch.Tensor], sigma: float, generator: torch.Generator | None = None) -> None:
    """Add i.i.d. N(0, sigma^2) noise to each tensor in place (sigma = 0 leaves them unchanged)."""
    if sigma < 0:
        raise ValueError(f"perturbation sigma must be >= 0, got {sigma}")
    if sigma == 0:
        return
    for tensor in tensors:
        noise = torch.randn(tensor.shape, generator=generator, dtype=torch.float32, device="cpu")
        tensor.add_((sigma * noise).to(device=tensor.device, dtype=tensor.dtype))
