"""3D voxel reconstruction: gravity-consistent block structures that explain a top view.

A G x G grid holds columns of unit blocks at most `max_height` high; every block above layer 1 rests on
a block directly below it, so a structure is a height per column. The top view (a row-major bitstring
of G*G characters, 1 = at least one block) shows which columns are occupied. For k occupied cells every
assignment of heights in {1..H}^k is admissible: |H_O| = H^k (G=3, H=3, 1..3 blocks: 129 top views,
2,619 structures).

Canonical hypothesis: layers bottom-first, each a row-major bitstring, joined by `/`, without trailing
empty layers. Answers read `Structure:` then `Layer 1:` ... each followed by G rows of G 0/1 values. The
parser also reads several rows on one line (`Layer 1: [1,0,0],[0,0,0],[0,0,0]`, `1 0 0; 0 0 0; 0 0 0`,
`100000000`), skips prose that merely begins with "Layer 1" (e.g. "Layer 1 is the bottom") to the first
real layer header, and reads the structure up to the first line that is neither a header nor rows.

Deliberate deviation from the reference code: it never checks the height limit, so a 4-layer answer
to a height-3 task counted as valid there; here a structure taller than `max_height` is outside the
hypothesis space (unreadable), as the task statement says.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

from divrl.tasks.hypospace.common import (
    MAX_ANSWER_CHARS,
    HypoSpaceTask,
    answer_lines,
    before_end,
    check_int,
    match_observation,
)

MAX_STRUCTURES = 2_000_000  # total size of all admissible sets one configuration may enumerate
_FIRST_HEADER = re.compile(r"^[ \t#*]*layer[ \t]*1\b", re.IGNORECASE | re.MULTILINE)
_ROW_CHARS = r"\s01,;|\[\]`"  # 0/1 values and what may surround them in a row
# A layer header, with any rows written on the same line (group 2; starting with a non-space keeps this linear).
_HEADER = re.compile(
    rf"[ \t#*]*layer[ \t]*(\d{{1,3}})(?:[ \t]*\([^)\n]{{0,40}}\))?[\s:*]*([01,;|\[\]`][{_ROW_CHARS}]*)?",
    re.IGNORECASE,
)
# Deletes what may surround 0/1 values in a row: whitespace (every str.isspace character; the last is U+3000)
# and , ; | [ ] `.
_ROW_NOISE = str.maketrans("", "", ",;|[]`" + "".join(filter(str.isspace, map(chr, range(0x3001)))))


class VoxelTask(HypoSpaceTask):
    """HypoSpace 3D reconstruction on a `grid` x `grid` board, `max_height` layers, 1..`max_blocks` columns
    (exactly `max_blocks` when `fixed`)."""

    domain = "voxel"
    answer_label = "Structure:"
    behavior_dims = 2
    behavior_names = ("mean_height", "height_spread")

    def __init__(
        self, grid: int = 3, max_height: int = 3, max_blocks: int = 3, fixed: bool = False, format_reward: float = 0.0
    ) -> None:
        super().__init__(format_reward)
        self.grid = check_int("grid", grid, 1, 6)
        self.max_height = check_int("max_height", max_height, 1, 6)
        self.max_blocks = check_int("max_blocks", max_blocks, 1, grid * grid)
        self.fixed = bool(fixed)
        self.cells = grid * grid
        self._observation = re.compile(f"[01]{{{self.cells}}}")
        total = sum(math.comb(self.cells, k) * max_height**k for k in self._block_counts())
        if total > MAX_STRUCTURES:
            raise ValueError(
                f"grid={grid}, max_height={max_height}, max_blocks={max_blocks} has {total:,} admissible structures "
                f"in all (limit {MAX_STRUCTURES:,}): lower max_blocks or max_height"
            )

    def _block_counts(self) -> range:
        return range(self.max_blocks, self.max_blocks + 1) if self.fixed else range(1, self.max_blocks + 1)

    @property
    def params(self) -> dict[str, Any]:
        return {"grid": self.grid, "max_height": self.max_height, "max_blocks": self.max_blocks, "fixed": self.fixed}

    @property
    def tag(self) -> str:
        return f"g{self.grid}-h{self.max_height}-b{self.max_blocks}{'f' if self.fixed else ''}"

    def _bits(self, cells: Iterable[int]) -> str:
        row = ["0"] * self.cells
        for cell in cells:
            row[cell] = "1"
        return "".join(row)

    def structure_key(self, heights: dict[int, int]) -> str:
        """Canonical key of the structure with column heights `heights` (cell -> height >= 1)."""
        top = max(heights.values())
        return "/".join(self._bits(c for c, h in heights.items() if h >= level) for level in range(1, top + 1))

    def enumerate(self) -> Iterable[tuple[list[str], list[str]]]:
        for k in self._block_counts():
            for cells in itertools.combinations(range(self.cells), k):
                structures = [
                    self.structure_key(dict(zip(cells, heights, strict=True)))
                    for heights in itertools.product(range(1, self.max_height + 1), repeat=k)
                ]
                yield [self._bits(cells)], sorted(structures)

    # -- reading answers ---------------------------------------------------------------------------------
    def read_answer(self, text: str) -> str | None:
        text = before_end(text)
        for first in _FIRST_HEADER.finditer(text):
            end = text.find("\n", first.start())
            if self._header(text[first.start() : end if end >= 0 else len(text)].strip()) is not None:
                return self._structure(answer_lines(text, first.start()))
            # else prose that merely begins with "Layer 1": look further
        return None

    def _header(self, line: str) -> tuple[int, str] | None:
        """(layer number, 0/1 values written on the same line) of a layer header, None for any other line."""
        match = _HEADER.fullmatch(line)
        if match is None:
            return None
        rows = match.group(2)
        return int(match.group(1)), rows.translate(_ROW_NOISE) if rows else ""

    def _structure(self, lines: Iterable[str]) -> str | None:
        """Canonical structure of `lines` (the first a layer header) up to the first line that is neither a header
        nor rows; None unless layers are numbered 1, 2, ..., each has G whole rows, and the answer fits
        MAX_ANSWER_CHARS."""
        layers: list[str] = []
        layer = ""
        missing = 0  # 0/1 values still missing from the current layer
        budget = MAX_ANSWER_CHARS
        for line in lines:
            budget -= len(line)
            if budget < 0:
                return None
            if missing:
                values = line.translate(_ROW_NOISE)
            else:
                header = self._header(line)
                if header is None:
                    break
                number, values = header
                if number != len(layers) + 1:
                    return None
                layer, missing = "", self.cells
            count = len(values)
            if count % self.grid or count > missing or values.strip("01"):
                return None
            layer += values
            missing -= count
            if not missing:
                layers.append(layer)
        return None if missing else self._canonical(layers)

    def _canonical(self, layers: list[str]) -> str | None:
        """Trim trailing empty layers; None unless non-empty, within the height limit and gravity-consistent."""
        while layers and "1" not in layers[-1]:
            layers.pop()
        if not layers or len(layers) > self.max_height:
            return None
        masks = [int(layer, 2) for layer in layers]
        if any(above & ~below for below, above in itertools.pairwise(masks)):
            return None
        return "/".join(layers)

    def _heights(self, hypothesis: str) -> list[int]:
        layers = hypothesis.split("/")
        return [sum(layer[c] == "1" for layer in layers) for c in range(self.cells) if layers[0][c] == "1"]

    def is_hypothesis(self, hypothesis: Any) -> bool:
        if not isinstance(hypothesis, str):
            return False
        layers = hypothesis.split("/")
        if any(len(layer) != self.cells or layer.strip("01") for layer in layers):
            return False
        return self._canonical(layers) == hypothesis

    def read_observation(self, line: Any) -> str:
        """The top view, a row-major bitstring of G*G characters."""
        return match_observation(self.domain, self._observation, line, self._bits([0])).group(0)

    def reproduces(self, hypothesis: str, observations: Sequence[str]) -> bool:
        layers = hypothesis.split("/")
        top_view = "".join("1" if any(layer[c] == "1" for layer in layers) else "0" for c in range(self.cells))
        return all(top_view == observation for observation in observations)

    def describe(self, hypothesis: str) -> tuple[float, ...]:
        heights = self._heights(hypothesis)
        if self.max_height == 1:
            return (0.0, 0.0)
        scale = self.max_height - 1
        return ((sum(heights) / len(heights) - 1) / scale, (max(heights) - min(heights)) / scale)

    # -- prompts ---------------------------------------------------------------------------------------
    def _grid_rows(self, bits: str) -> str:
        return "\n".join(" ".join(bits[r * self.grid : (r + 1) * self.grid]) for r in range(self.grid))

    def rules(self) -> str:
        g = self.grid
        count = f"exactly {self.max_blocks}" if self.fixed else f"1 to {self.max_blocks}"
        return (
            f"3D reconstruction. Unit blocks stand on a {g}x{g} grid in at most {self.max_height} layers. Gravity: "
            "every block above layer 1 sits directly on a block in the layer below. The top view marks with 1 "
            f"each of the {count} grid cells that holds at least one block. A structure lists its layers from "
            f"the bottom (Layer 1) up, each as {g} rows of {g} space-separated 0/1 values; empty layers are left out."
        )

    def observation_block(self, observations: Sequence[str]) -> str:
        return "Top view:\n" + "\n\n".join(self._grid_rows(o) for o in observations)

    def render_answer(self, hypothesis: str) -> str:
        layers = [f"Layer {i}:\n{self._grid_rows(bits)}" for i, bits in enumerate(hypothesis.split("/"), 1)]
        return "Structure:\n" + "\n".join(layers)

    def format_example(self) -> str:
        one = "1" + "0" * (self.cells - 1)
        two = "11" + "0" * (self.cells - 2) if self.cells > 1 else one
        return self.render_answer(f"{two}/{one}" if self.max_height > 1 else two)
