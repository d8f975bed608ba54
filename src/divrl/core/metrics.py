"""Diversity metrics: pairwise cosine distance, distinct outcomes, Vendi scores, entropy, L1 and KL to a target."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence

import torch

from divrl.core._args import checked


@checked
def mean_pairwise_cosine_distance(x: torch.Tensor, counts: bool = False) -> float:
    """Mean of 1 - cos(x_i, x_j) over pairs i < j (0 for fewer than two rows): in [0, 2], 2 for opposite rows.

    A zero row has no direction, so cos is undefined for it. Convention: two zero rows are identical
    (distance 0: a batch of empty texts, all embedded as 0, has no diversity); a zero row and a non-zero
    row are unrelated (cos 0, distance 1).

    counts=True: the rows estimate vectors of non-negative counts (`hashed_ngram_embedding`: signed hashing of
    character n-gram counts), whose true cosine lies in [0, 1]. A negative cosine is then hashing noise (two texts
    without a shared n-gram collide in buckets of opposite sign) and is clamped to 0, which never moves an estimate
    away from the true value: the distance lies in [0, 1], 1 for texts that share no n-gram (`diversity/pairwise`).
    """
    if x.dim() != 2:
        raise ValueError(f"expected a (batch, dim) tensor, got shape {tuple(x.shape)}")
    n = x.shape[0]
    if n < 2:
        return 0.0
    unit = torch.nn.functional.normalize(x.float(), dim=1)
    similarity = unit @ unit.T
    zero = (x == 0).all(dim=1)
    similarity = torch.where(zero[:, None] & zero[None, :], 1.0, similarity)
    if counts:
        similarity = similarity.clamp(0.0, 1.0)
    off_diagonal_sum = similarity.sum() - similarity.diagonal().sum()
    return float(1.0 - off_diagonal_sum / (n * (n - 1)))


@checked
def distinct_outcomes(keys: Sequence[Hashable | None]) -> int:
    """Number of distinct valid outcomes (None ignored)."""
    return len({k for k in keys if k is not None})


def _effective_number(weights: torch.Tensor) -> float:
    """exp of the Shannon entropy of non-negative `weights` normalised to sum 1 (negative round-off clamped)."""
    weights = weights.double().clamp(min=0.0)
    return math.exp(outcome_entropy(weights / weights.sum()))


@checked
def vendi_score(similarity: torch.Tensor) -> float:
    """Vendi score (Friedman & Dieng 2023): exp of the Shannon entropy of the eigenvalues of K / n, for an n x n
    positive semi-definite similarity K with unit diagonal: the effective number of distinct items (1 for n copies
    of one item, n for n mutually orthogonal ones); 0.0 for no items, NaN when a similarity is not finite."""
    if similarity.dim() != 2 or similarity.shape[0] != similarity.shape[1]:
        raise ValueError(f"similarity must be a square (n, n) matrix, got shape {tuple(similarity.shape)}")
    n = similarity.shape[0]
    if n == 0:
        return 0.0
    if not torch.isfinite(similarity).all():
        return math.nan
    return _effective_number(torch.linalg.eigvalsh(similarity.double() / n))


@checked
def vendi_score_of_keys(keys: Sequence[Hashable | None]) -> float:
    """Vendi score with K_ij = 1 when two items share their outcome key: exp of the entropy of the key
    frequencies (the effective number of outcomes); invalid items (None) are left out, 0.0 when none is valid."""
    counts = torch.tensor(list(Counter(k for k in keys if k is not None).values()), dtype=torch.float64)
    return 0.0 if counts.numel() == 0 else _effective_number(counts)


@checked
def vendi_score_of_embeddings(x: torch.Tensor) -> float:
    """Vendi score with the cosine-similarity kernel of the rows of `x` (n, d). Zero rows, which have no
    direction, count as one shared item unrelated to the others (as in `mean_pairwise_cosine_distance`). The
    eigenvalues come from the smaller of the n x n and d x d Gram matrices (they share their non-zero ones).
    NaN when an entry of `x` is not finite (as `vendi_score` for a similarity that is not)."""
    if x.dim() != 2:
        raise ValueError(f"expected a (batch, dim) tensor, got shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        return math.nan
    zero = (x == 0).all(dim=1, keepdim=True)
    unit = torch.nn.functional.normalize(torch.cat([x.double(), zero.double()], dim=1), dim=1)
    n = unit.shape[0]
    if n == 0:
        return 0.0
    gram = unit @ unit.T if n <= unit.shape[1] else unit.T @ unit
    return _effective_number(torch.linalg.eigvalsh(gram / n))


@checked
def empirical_distribution(keys: Sequence[Hashable | None], support: Sequence[Hashable]) -> torch.Tensor:
    """Frequencies of each support element among `keys` (None and keys outside the support count in the total)."""
    if not keys:
        raise ValueError("empirical_distribution needs at least one key")
    counts = Counter(keys)
    return torch.tensor([counts[s] for s in support], dtype=torch.float64) / len(keys)


def _as_distribution(p: torch.Tensor | Sequence[float], name: str) -> torch.Tensor:
    p = torch.as_tensor(p, dtype=torch.float64)
    if p.dim() != 1 or (p < 0).any():
        raise ValueError(f"{name} must be a 1-D non-negative vector, got {p.tolist()}")
    return p


@checked
def outcome_entropy(probs: torch.Tensor | Sequence[float]) -> float:
    """Shannon entropy (nats) of a probability vector; zero entries contribute 0."""
    p = _as_distribution(probs, "probs")
    p = p[p > 0]
    return float(-(p * p.log()).sum())


@checked
def l1_distance(p: torch.Tensor | Sequence[float], q: torch.Tensor | Sequence[float]) -> float:
    """Sum of absolute differences between two distributions on the same support."""
    p, q = _as_distribution(p, "p"), _as_distribution(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"distributions have different supports: {p.numel()} vs {q.numel()} entries")
    return float((p - q).abs().sum())


@checked
def kl_divergence(p: torch.Tensor | Sequence[float], q: torch.Tensor | Sequence[float], eps: float = 1e-12) -> float:
    """KL(p || q) in nats; q is floored at `eps` so a missed mode gives a large finite value."""
    p, q = _as_distribution(p, "p"), _as_distribution(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"distributions have different supports: {p.numel()} vs {q.numel()} entries")
    mask = p > 0
    return float((p[mask] * (p[mask].log() - q[mask].clamp(min=eps).log())).sum())
