"""Cross-step outcome-count bonus: historical UCB exploration over outcomes (Song, Kempe, Munos 2025).

Group-frequency IPS sees only the G samples of one step: it cannot reward an outcome the policy no longer samples,
nor see that one outcome is written for every prompt. This bonus remembers, across training, how often each
(prompt, outcome) was sampled and pays c / sqrt(1 + n(x, o)) for a valid outcome: rarely seen answers earn more.
With `across_prompts` the count ignores the prompt, so one answer written for every observation is penalised.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from divrl.core._args import checked
from divrl.core._groups import check_state_keys

COUNT_SCOPES = ("prompt", "global")


class OutcomeCounts:
    """Counts n(x, o) of valid outcomes o per context x (or over all contexts) kept across training steps."""

    @checked
    def __init__(self, coef: float, scope: str = "prompt") -> None:
        self._configure(coef, scope)
        self.counts: Counter = Counter()

    def _configure(self, coef: float, scope: str) -> None:
        if not (math.isfinite(coef) and coef >= 0):
            raise ValueError(f"count bonus coefficient must be a finite number >= 0, got {coef}")
        if scope not in COUNT_SCOPES:
            raise ValueError(f"count scope must be one of {', '.join(map(repr, COUNT_SCOPES))}, got {scope!r}")
        self.coef, self.scope = float(coef), scope

    def _entry(self, context: Hashable, key: Hashable) -> tuple:
        return (None if self.scope == "global" else context, key)

    @checked
    def bonus(self, contexts: Sequence[Hashable], keys: Sequence[Hashable | None]) -> torch.Tensor:
        """Count the batch's valid outcomes, then return coef / sqrt(1 + n(x, o)) per item (0 where the key is None).

        n includes this batch, so the result does not depend on the order of items and an outcome repeated
        inside the batch earns less than one sampled once (historical and within-batch exploration at once)."""
        if len(contexts) != len(keys):
            raise ValueError(f"got {len(contexts)} contexts but {len(keys)} outcome keys")
        self.counts.update(self._entry(x, o) for x, o in zip(contexts, keys, strict=True) if o is not None)
        return torch.tensor([0.0 if o is None else self.coef / math.sqrt(1 + self.counts[self._entry(x, o)])
                             for x, o in zip(contexts, keys, strict=True)])

    def distinct(self) -> int:
        """Number of distinct (context, outcome) entries counted so far (distinct outcomes with scope 'global')."""
        return len(self.counts)

    def state_dict(self) -> dict[str, Any]:
        """Configuration and counts as [context, outcome key, count] lists (torch.save-able, loads with
        weights_only=True; tuple keys stay tuples)."""
        return {"coef": self.coef, "scope": self.scope,
                "counts": [[context, key, count] for (context, key), count in self.counts.items()]}

    @checked
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore counts saved by `state_dict`; ValueError on missing keys or a malformed entry."""
        check_state_keys(state, ("coef", "scope", "counts"), "OutcomeCounts")
        counts: Counter = Counter()
        for entry in state["counts"]:
            if len(entry) != 3 or not isinstance(entry[2], int) or isinstance(entry[2], bool) or entry[2] < 1:
                raise ValueError(f"OutcomeCounts entries must be [context, outcome key, count >= 1], got {entry!r}")
            counts[(entry[0], entry[1])] = entry[2]
        self._configure(float(state["coef"]), str(state["scope"]))
        self.counts = counts

