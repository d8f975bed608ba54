"""MAP-Elites grid archive (QD-GRPO, the execution-rewards paper): one elite per behaviour cell, bonuses for new and
improved cells.

The API follows pyribs: `add` returns a status per item, `stats` gives coverage and QD score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np
import torch

from divrl.core._args import checked
from divrl.core._groups import check_state_keys


class AddStatus(IntEnum):
    """What adding one item did to the archive."""

    NOT_ADDED = 0
    IMPROVED = 1
    NEW = 2


@dataclass(frozen=True)
class ArchiveStats:
    """Summary of an archive: fraction of cells filled, QD score (sum of elite objectives minus offset)."""

    coverage: float
    qd_score: float
    best: float
    num_elites: int


class GridArchive:
    """A regular grid over a box of behaviour space holding the best objective seen in each cell.

    Descriptors outside `ranges` are clipped into the edge cells (as in pyribs); items whose descriptor
    or objective is None/NaN are never added.
    """

    @checked
    def __init__(
        self, dims: Sequence[int], ranges: Sequence[tuple[float, float]], qd_score_offset: float = 0.0
    ) -> None:
        if len(dims) == 0 or any(int(d) < 1 for d in dims):
            raise ValueError(f"dims must be a non-empty list of positive cell counts, got {list(dims)}")
        if len(ranges) != len(dims):
            raise ValueError(f"ranges has {len(ranges)} entries but dims has {len(dims)}: one (low, high) per dim")
        if any(not float(low) < float(high) for low, high in ranges):
            raise ValueError(f"every range must satisfy low < high, got {list(ranges)}")
        self.dims = tuple(int(d) for d in dims)
        self.ranges = tuple((float(low), float(high)) for low, high in ranges)
        self.qd_score_offset = float(qd_score_offset)
        self.num_cells = math.prod(self.dims)
        self._objective = np.full(self.num_cells, np.nan)
        self._descriptor = np.full((self.num_cells, len(self.dims)), np.nan)

    @property
    def behavior_dims(self) -> int:
        """Dimension of the descriptors this archive accepts."""
        return len(self.dims)

    def _as_descriptors(self, descriptors: Any) -> np.ndarray:
        try:
            array = np.asarray(
                [[np.nan] * self.behavior_dims if d is None else d for d in descriptors], dtype=float
            ).reshape(len(descriptors), -1)
        except (TypeError, ValueError) as error:
            raise ValueError(f"descriptors must be a sequence of {self.behavior_dims}-D points (or None), got "
                             f"{type(descriptors).__name__}: {error}") from None
        if array.shape[1] != self.behavior_dims:
            raise ValueError(
                f"descriptors have dimension {array.shape[1]} but the archive has {self.behavior_dims} dims"
            )
        return array

    @checked
    def cell_index(self, descriptors: Any) -> np.ndarray:
        """Flat cell index of each descriptor (row-major over `dims`); -1 where the descriptor is NaN."""
        array = self._as_descriptors(descriptors)
        low = np.array([r[0] for r in self.ranges])
        high = np.array([r[1] for r in self.ranges])
        dims = np.array(self.dims)
        valid = ~np.isnan(array).any(axis=1)
        fraction = (np.nan_to_num(array) - low) / (high - low)
        coords = np.clip(np.floor(fraction * dims).astype(int), 0, dims - 1)
        flat = np.ravel_multi_index(coords.T, self.dims) if len(array) else np.zeros(0, dtype=int)
        return np.where(valid, flat, -1)

    @checked
    def add(self, descriptors: Any, objectives: Any) -> list[AddStatus]:
        """Insert a batch; per cell only the batch's best item can enter, so a new cell counts NEW once.

        The best item of a cell is NEW if the cell was empty, IMPROVED if it beats the elite; all other
        items are NOT_ADDED. Order-independent within a batch (ties go to the earlier item).
        """
        cells = self.cell_index(descriptors)
        try:
            values = np.asarray([np.nan if o is None else o for o in objectives], dtype=float).reshape(-1)
        except (TypeError, ValueError) as error:
            raise ValueError(f"objectives must be a sequence of numbers (or None), got {type(objectives).__name__}: "
                             f"{error}") from None
        if len(values) != len(cells):
            raise ValueError(f"got {len(cells)} descriptors but {len(values)} objectives")
        descriptor_array = self._as_descriptors(descriptors)
        statuses = [AddStatus.NOT_ADDED] * len(cells)
        best_item: dict[int, int] = {}
        for i, (cell, value) in enumerate(zip(cells, values)):
            if cell < 0 or np.isnan(value):
                continue
            if cell not in best_item or value > values[best_item[cell]]:
                best_item[int(cell)] = i
        for cell, i in best_item.items():
            elite = self._objective[cell]
            if np.isnan(elite) or values[i] > elite:
                statuses[i] = AddStatus.NEW if np.isnan(elite) else AddStatus.IMPROVED
                self._objective[cell] = values[i]
                self._descriptor[cell] = descriptor_array[i]
        return statuses

    def stats(self) -> ArchiveStats:
        """Coverage, QD score, best objective (NaN when empty) and number of elites."""
        filled = ~np.isnan(self._objective)
        num_elites = int(filled.sum())
        return ArchiveStats(
            coverage=num_elites / self.num_cells,
            qd_score=float((self._objective[filled] - self.qd_score_offset).sum()),
            best=float(self._objective[filled].max()) if num_elites else float("nan"),
            num_elites=num_elites,
        )

    def elites(self) -> list[tuple[int, list[float], float]]:
        """(cell index, descriptor, objective) of every elite, in cell order."""
        return [
            (int(c), self._descriptor[c].tolist(), float(self._objective[c]))
            for c in np.flatnonzero(~np.isnan(self._objective))
        ]

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state: configuration plus the elites."""
        return {"dims": list(self.dims), "ranges": [list(r) for r in self.ranges],
                "qd_score_offset": self.qd_score_offset, "elites": self.elites()}

    @checked
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore elites saved by `state_dict`; the grid configuration must match and every elite's cell exist."""
        check_state_keys(state, ("dims", "ranges", "elites"), "GridArchive")
        if tuple(state["dims"]) != self.dims or tuple(tuple(r) for r in state["ranges"]) != self.ranges:
            raise ValueError(
                f"archive state has dims {state['dims']} / ranges {state['ranges']}, "
                f"this archive has {list(self.dims)} / {[list(r) for r in self.ranges]}"
            )
        bad = [elite for elite in state["elites"] if not (len(elite) == 3 and 0 <= int(elite[0]) < self.num_cells)]
        if bad:
            raise ValueError(f"archive state has elites that are not (cell, descriptor, objective) with a cell in "
                             f"[0, {self.num_cells}): {bad[:5]}")
        self.qd_score_offset = float(state.get("qd_score_offset", 0.0))
        self._objective[:] = np.nan
        self._descriptor[:] = np.nan
        for cell, descriptor, objective in state["elites"]:
            self._objective[cell] = objective
            self._descriptor[cell] = descriptor


@checked
def archive_bonus(statuses: Sequence[AddStatus], beta_new: float, beta_imp: float) -> torch.Tensor:
    """Reward bonus per item: beta_new for a NEW cell, beta_imp for an IMPROVED one, 0 otherwise."""
    table = {AddStatus.NEW: beta_new, AddStatus.IMPROVED: beta_imp, AddStatus.NOT_ADDED: 0.0}
    return torch.tensor([table[AddStatus(s)] for s in statuses], dtype=torch.get_default_dtype())
