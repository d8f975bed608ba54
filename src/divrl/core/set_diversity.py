"""Set-level diversity and each member's leave-one-out share of it (SGRPO: Ye et al. 2026, "Pushing Biomolecular
Utility-Diversity Frontiers with Supergroup Relative Policy Optimization", arXiv 2605.08659).

D(S) = 1 - mean over pairs i < j of sim(e_i, e_j), over a set S of embeddings; 0 for fewer than two members (SGRPO's
released code: Morgan radius-2 2048-bit fingerprints and Tanimoto similarity for molecules). A member's credit is
D(S) - D(S without it): positive when it raises the set's diversity, negative when it is close to the others.
Similarities: 'tanimoto' (a.b / (|a|^2 + |b|^2 - a.b): the bit Tanimoto for 0/1 fingerprints, the continuous
Tanimoto for non-negative vectors such as n-gram counts) or 'cosine'.
"""

from __future__ import annotations

import torch

from divrl.core._args import checked

SIMILARITIES = ("tanimoto", "cosine")


def _similarity_matrix(embeddings: torch.Tensor, similarity: str) -> torch.Tensor:
    """(n, n) pairwise similarities of (n, d) float64 embeddings."""
    dots = embeddings @ embeddings.T
    if similarity == "tanimoto":
        squares = torch.diagonal(dots)
        union = squares[:, None] + squares[None, :] - dots
        return torch.where(union > 0, dots / union.clamp(min=1e-12), torch.ones_like(dots))
    norms = embeddings.norm(dim=1).clamp(min=1e-12)
    return dots / (norms[:, None] * norms[None, :])


def _check(embeddings: torch.Tensor, similarity: str) -> None:
    if embeddings.dim() != 2:
        raise ValueError(f"embeddings must be (n, d), got shape {tuple(embeddings.shape)}")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")


@checked
def set_diversity(embeddings: torch.Tensor, similarity: str = "tanimoto") -> float:
    """D = 1 - the mean pairwise similarity over pairs i < j of the (n, d) embeddings; 0.0 when n < 2."""
    _check(embeddings, similarity)
    n = embeddings.shape[0]
    if n < 2:
        return 0.0
    sims = _similarity_matrix(embeddings.to(torch.float64), similarity)
    return float(1.0 - torch.triu(sims, diagonal=1).sum() / (n * (n - 1) / 2))


@checked
def leave_one_out_diversity(embeddings: torch.Tensor, valid: torch.Tensor, similarity: str = "tanimoto"
                            ) -> torch.Tensor:
    """(n,) credits D(V) - D(V without i) for the valid rows V of the (n, d) embeddings (`valid`: (n,) bool); 0 for
    invalid rows. In O(n^2): removing i takes its row of similarities out of the pair sum."""
    _check(embeddings, similarity)
    if valid.shape != (embeddings.shape[0],) or valid.dtype != torch.bool:
        raise ValueError(f"valid must be a bool tensor of shape ({embeddings.shape[0]},), got {valid.dtype} "
                         f"{tuple(valid.shape)}")
    credits = torch.zeros(embeddings.shape[0], dtype=torch.float64)
    rows = valid.nonzero().flatten()
    m = len(rows)
    if m < 2:
        return credits.float()
    sims = _similarity_matrix(embeddings[rows].to(torch.float64), similarity)
    off_diagonal = sims - torch.diag(torch.diagonal(sims))
    pair_sum = off_diagonal.sum() / 2
    whole = 1.0 - pair_sum / (m * (m - 1) / 2)
    if m == 2:  # without either member one remains: D = 0
        credits[rows] = whole
        return credits.float()
    without = 1.0 - (pair_sum - off_diagonal.sum(dim=1)) / ((m - 1) * (m - 2) / 2)
    credits[rows] = whole - without
    return credits.float()
