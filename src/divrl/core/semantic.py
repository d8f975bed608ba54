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

from divrl.core._args import checked
from divrl.core._groups import check_state_keys


class LeaderClusters:
    """Incremental leader clustering by cosine similarity; `assign` returns one class id per embedding."""

    @checked
    def __init__(self, threshold: float = 0.6, max_leaders: int = 4096) -> None:
        self._configure(threshold, max_leaders)
        # leaders live in the first `_count` rows of `_store`, which doubles when full (amortised O(1) growth)
        self._store: torch.Tensor | None = None
        self._count = 0

    def _configure(self, threshold: float, max_leaders: int) -> None:
        if not (math.isfinite(threshold) and -1 <= threshold <= 1):
            raise ValueError(f"cosine threshold must be in [-1, 1], got {threshold}")
        if max_leaders < 1:
            raise ValueError(f"max_leaders must be >= 1, got {max_leaders}")
        self.threshold, self.max_leaders = float(threshold), int(max_leaders)

    @property
    def leaders(self) -> torch.Tensor | None:
        """(L, dim) L2-normalised leader embeddings in class-id order, None before the first class."""
        return None if self._store is None else self._store[: self._count]

    def __len__(self) -> int:
        return self._count

    @checked
    def assign(self, embeddings: torch.Tensor) -> list[int | None]:
        """Class id of each row in order (rows founding a class become leaders for the rows after them); None for
        an all-zero row (an empty text has no meaning to compare). Once `max_leaders` classes exist, a row joins
        the most similar class instead of founding a new one, which bounds memory and time. The rows meet the
        earlier leaders in one matrix product and only this call's new leaders one by one."""
        if embeddings.dim() != 2:
            raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
        if self._store is not None and embeddings.shape[1] != self._store.shape[1]:
            raise ValueError(f"embedding dim {embeddings.shape[1]} != the clusters' dim {self._store.shape[1]}")
        raw = embeddings.detach().float()
        vectors = torch.nn.functional.normalize(raw, dim=1)
        usable = (raw.norm(dim=1) > 0) & torch.isfinite(vectors).all(dim=1)
        earlier = len(self)
        best_earlier = (vectors @ self.leaders.T).max(dim=1) if earlier else None
        founded: list[int] = []  # rows of `vectors` that found a class in this call
        new_leaders = torch.empty_like(vectors)  # their vectors, filled in place (no copy of them per row)
        keys: list[int | None] = []
        for row in range(len(vectors)):
            if not usable[row]:
                keys.append(None)
                continue
            similarity, best = (-math.inf, -1) if best_earlier is None else (
                float(best_earlier.values[row]), int(best_earlier.indices[row]))
            if founded:
                recent = new_leaders[: len(founded)] @ vectors[row]
                position = int(recent.argmax())
                if float(recent[position]) > similarity:  # ties go to the older class, as one argmax over all
                    similarity, best = float(recent[position]), earlier + position
            if best >= 0 and (similarity >= self.threshold or earlier + len(founded) >= self.max_leaders):
                keys.append(best)
                continue
            new_leaders[len(founded)] = vectors[row]
            founded.append(row)
            keys.append(earlier + len(founded) - 1)
        self._append(vectors[founded])
        return keys

    def _append(self, rows: torch.Tensor) -> None:
        """Store new leaders after the existing ones."""
        if not len(rows):
            return
        needed = self._count + len(rows)
        if self._store is None or needed > len(self._store):
            grown = rows.new_empty((max(needed, 2 * self._count, 16), rows.shape[1]))
            if self._store is not None:
                grown[: self._count] = self.leaders
            self._store = grown
        self._store[self._count : needed] = rows
        self._count = needed

    def state_dict(self) -> dict[str, Any]:
        """Configuration and leaders (a tensor; save with torch.save)."""
        leaders = self.leaders
        return {"threshold": self.threshold, "max_leaders": self.max_leaders,
                "leaders": None if leaders is None else leaders.clone()}

    @checked
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore clusters saved by `state_dict`; ValueError on missing keys or malformed leaders."""
        check_state_keys(state, ("threshold", "max_leaders", "leaders"), "LeaderClusters")
        leaders = None if state["leaders"] is None else torch.as_tensor(state["leaders"]).float().clone()
        if leaders is not None and (leaders.dim() != 2 or leaders.shape[0] > int(state["max_leaders"])):
            raise ValueError(f"cluster leaders must be (n <= max_leaders={state['max_leaders']}, dim), "
                             f"got shape {tuple(leaders.shape)}")
        self._configure(float(state["threshold"]), int(state["max_leaders"]))
        self._store, self._count = leaders, 0 if leaders is None else len(leaders)
