"""kNN novelty reward over a rolling memory (MaxEnt-GRPO, the execution-rewards paper) and a cheap default text
embedding."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import torch

from divrl.core._args import checked
from divrl.core._groups import check_state_keys

# Texts longer than this are embedded from their first characters only: bounded cost for any model output.
MAX_EMBED_CHARS = 8192


class NoveltyMemory:
    """Novelty = gamma x mean distance to the k nearest embeddings in a FIFO memory of `capacity` items."""

    @checked
    def __init__(self, capacity: int = 512, k: int = 5, gamma: float = 0.3) -> None:
        self._configure(capacity, k, gamma)
        self._memory: torch.Tensor | None = None  # (n <= capacity, D), oldest first

    def _configure(self, capacity: int, k: int, gamma: float) -> None:
        """Validate and set the memory size, neighbour count and coefficient."""
        if capacity < 1:
            raise ValueError(f"novelty capacity must be >= 1, got {capacity}")
        if k < 1:
            raise ValueError(f"novelty k must be >= 1, got {k}")
        if not gamma >= 0:
            raise ValueError(f"novelty gamma must be >= 0, got {gamma}")
        self.capacity, self.k, self.gamma = int(capacity), int(k), float(gamma)

    def __len__(self) -> int:
        return 0 if self._memory is None else self._memory.shape[0]

    def _check(self, embeddings: torch.Tensor) -> torch.Tensor:
        if embeddings.dim() != 2:
            raise ValueError(f"embeddings must be (batch, dim), got shape {tuple(embeddings.shape)}")
        if self._memory is not None and embeddings.shape[1] != self._memory.shape[1]:
            raise ValueError(f"embedding dim {embeddings.shape[1]} != memory dim {self._memory.shape[1]}")
        return embeddings.detach().float().cpu()

    @checked
    def score(self, embeddings: torch.Tensor) -> torch.Tensor:
        """Novelty of each row against the memory (before adding the batch); zeros while the memory is empty."""
        embeddings = self._check(embeddings)
        if self._memory is None:
            return torch.zeros(embeddings.shape[0])
        k = min(self.k, self._memory.shape[0])
        distances = torch.cdist(embeddings, self._memory)
        return self.gamma * distances.topk(k, dim=1, largest=False).values.mean(dim=1)

    @checked
    def add(self, embeddings: torch.Tensor) -> None:
        """Append a batch, dropping the oldest items beyond capacity."""
        embeddings = self._check(embeddings)
        merged = embeddings if self._memory is None else torch.cat([self._memory, embeddings])
        self._memory = merged[-self.capacity :].clone()

    def state_dict(self) -> dict[str, Any]:
        """Configuration and memory contents (a tensor; save with torch.save)."""
        return {"capacity": self.capacity, "k": self.k, "gamma": self.gamma, "memory": self._memory}

    @checked
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a memory saved by `state_dict`; ValueError on missing keys, a bad configuration or memory."""
        check_state_keys(state, ("capacity", "k", "gamma", "memory"), "NoveltyMemory")
        memory = None if state["memory"] is None else torch.as_tensor(state["memory"]).float().clone()
        if memory is not None and (memory.dim() != 2 or memory.shape[0] > int(state["capacity"])):
            raise ValueError(f"novelty memory must be (n <= capacity={state['capacity']}, dim), "
                             f"got shape {tuple(memory.shape)}")
        self._configure(int(state["capacity"]), int(state["k"]), float(state["gamma"]))
        self._memory = memory


@checked
def hashed_ngram_embedding(texts: Sequence[str], dim: int = 256, n: int = 3) -> torch.Tensor:
    """L2-normalised signed counts of hashed character n-grams: cheap, deterministic across processes.

    Uses crc32 (not Python's salted `hash`) so every process and run maps a text to the same vector.
    """
    if dim < 1 or n < 1:
        raise ValueError(f"dim and n must be >= 1, got dim={dim}, n={n}")
    rows = []
    for text in texts:
        text = str(text)[:MAX_EMBED_CHARS]
        counts = [0.0] * dim  # a Python list: one tensor element update per n-gram costs ~20x more
        for start in range(max(len(text) - n + 1, 1 if text else 0)):
            digest = zlib.crc32(text[start : start + n].encode("utf-8", "surrogatepass"))
            counts[digest % dim] += 1.0 if (digest >> 31) & 1 else -1.0
        rows.append(counts)
    out = torch.tensor(rows, dtype=torch.float32).reshape(len(texts), dim)
    return torch.nn.functional.normalize(out, dim=1)
