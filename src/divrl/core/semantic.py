"""Semantic outcome classes: outcome keys for free text, from leader clustering of embeddings.

IPS and the count bonus count outcomes, and on free text (research ideas, explanations) two completions are
rarely the same string, so every text would be its own outcome and IPS would do nothing. DARLING (Li et al.
2025, "Jointly Reinforcing Diversity and Quality in Language Model Generations") partitions a group's answers
into equivalence classes with a learned classifier; divrl's offline stand-in is leader clustering on embeddings
(hashed character n-grams by default): a completion joins the class whose leader is most similar to it when that
cosine similarity is >= threshold, else it founds a new class. Leaders persist across steps (and checkpoints), so a
class keeps its key over training, which the count bonus needs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from divrl.core._groups import check_state_keys


class LeaderClusters:
    """Incremental leader clustering by cosine similarity; `assign` returns one class id per embedding."""

    def __init__(self, threshold: float = 0.6, max_leaders: int = 4096) -> None:
        self._configure(threshold, max_leaders)
        self.leaders: torch.Tensor | None = None  # (L, dim), L2-normalised

    def _configure(self, threshold: float, max_leaders: int) -> None:
        if not (math.isfinite(threshold) and -1 <= threshold <= 1):
            raise ValueError(f"cosine threshold must be in [-1, 1], got {threshold}")
        if max_leaders < 1:
            raise ValueError(f"max_leaders must be >= 1, got {max_leaders}")
        self.threshold, self.max_leaders = float(threshold), int(max_leaders)

    def __len__(self) -> int:
        return 0 if self.leaders is None else int(self.leaders.shape[0])

    def assign(self, embeddings: torch.Tensor) -> list[int | None]:
        """Class id of each row in order (rows founding a class become leaders for the rows after them); None for
        an all-zero row (an empty text has no meaning to compare). Once `max_leaders` classes exist, a row joins
        the most similar class instead of founding a new one, which bounds memory and time."""
        if embeddings.dim() != 2:
            raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
        if self.leaders is not None and embeddings.shape[1] != self.leaders.shape[1]:
            raise ValueError(f"embedding dim {embeddings.shape[1]} != the clusters' dim {self.leaders.shape[1]}")
        vectors = torch.nn.functional.normalize(embeddings.detach().float(), dim=1)
        keys: list[int | None] = []
        for vector, norm in zip(vectors, embeddings.detach().float().norm(dim=1), strict=True):
            if norm == 0 or not torch.isfinite(vector).all():
                keys.append(None)
                continue
            if self.leaders is not None:
                similarity = self.leaders @ vector
                best = int(similarity.argmax())
                if similarity[best] >= self.threshold or len(self) >= self.max_leaders:
                    keys.append(best)
                    continue
            self.leaders = vector[None].clone() if self.leaders is None else torch.cat([self.leaders, vector[None]])
            keys.append(len(self) - 1)
        return keys

    def state_dict(self) -> dict[str, Any]:
        """Configuration and leaders (a tensor; save with torch.save)."""
        return {"threshold": self.threshold, "max_leaders": self.max_leaders, "leaders": self.leaders}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore clusters saved by `state_dict`; ValueError on missing keys or malformed leaders."""
        check_state_keys(state, ("threshold", "max_leaders", "leaders"), "LeaderClusters")
        leaders = None if state["leaders"] is None else torch.as_tensor(state["leaders"]).float().clone()
        if leaders is not None and (leaders.dim() != 2 or leaders.shape[0] > int(state["max_leaders"])):
            raise ValueError(f"cluster leaders must be (n <= max_leaders={state['max_leaders']}, dim), "
                             f"got shape {tuple(leaders.shape)}")
        self._configure(float(state["threshold"]), int(state["max_leaders"]))
        self.leaders = leaders
