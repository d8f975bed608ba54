"""A bounded memory of the best distinct outcomes seen so far, for experience replay (REINVENT's inception memory,
Blaschke et al. 2020; Saturn's augmented memory, Guo & Schwaller 2024).

Each entry is (key, item, score): `key` names the outcome (a canonical SMILES), `item` is what replaying it needs
(its prompt and completion), `score` its task score. The memory keeps the `capacity` best-scoring distinct keys; a key
already held keeps its first item and score (an oracle's score of a molecule does not change). `sample` draws
without replacement, reproducibly for a `random.Random`.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Hashable
from typing import Any


class ReplayMemory:
    """The `capacity` best-scoring distinct outcomes, best first."""

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        self.entries: list[tuple[Hashable, Any, float]] = []  # sorted by score, best first

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, key: Hashable, item: Any, score: float) -> bool:
        """Offer an outcome; True when the memory now holds it (new and among the best `capacity`)."""
        if any(held == key for held, _, _ in self.entries):
            return False
        negated = [-s for _, _, s in self.entries]
        position = bisect.bisect_right(negated, -score)  # after equal scores: the earlier entry stays ahead
        if position >= self.capacity:
            return False
        self.entries.insert(position, (key, item, float(score)))
        del self.entries[self.capacity :]
        return True

    def sample(self, k: int, rng: random.Random) -> list[tuple[Hashable, Any, float]]:
        """Up to `k` entries drawn without replacement."""
        return rng.sample(self.entries, min(k, len(self.entries)))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: capacity and entries in order."""
        return {"capacity": self.capacity, "entries": [[key, item, score] for key, item, score in self.entries]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict` output; a memory of another capacity is refused."""
        if state.get("capacity") != self.capacity:
            raise ValueError(f"the saved replay memory holds {state.get('capacity')} entries, this one "
                             f"{self.capacity}: resume with the run's replay_memory_size")
        self.entries = [(key, item, float(score)) for key, item, score in state["entries"]]
