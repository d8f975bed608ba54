"""Causal discovery: DAGs on nodes A, B, ... explaining single-node perturbation observations.

Perturbing node v sets v to 0, every descendant of v to 1 and every other node to 0
(`Perturb(A) -> A:0 B:1 C:0`). An observation set is k observations with distinct perturbed nodes;
H_O is every DAG with at most `max_edges` edges that reproduces all of them. Counts with unrestricted
edges: 25 / 543 DAGs and 61 / 847 observation sets (all k) for 3 / 4 nodes.

Canonical hypothesis: edges `A->B` sorted and joined by `;` ("" for no edges). Answers read
`Graph: A->B, B->C` or `Graph: No edges`. Accepted noise: arrows ->, - >, =>, →, ⇒, ⟶, ⟹, —>, LaTeX
\\to, \\rightarrow, \\Rightarrow, \\longrightarrow; chains `A->B->C`; brackets, quotes and the math
delimiters $, \\( and \\); edges continued over following lines (a line that goes on with a separator or an
arrow, or that starts with another edge, optionally as a `-` / `*` / `•` bullet). Unknown nodes, self loops,
cycles and too many edges make a proposal unreadable (outside the space), and so does a continuation line
that cannot be read.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from divrl.tasks.hypospace.common import (
    MAX_ANSWER_CHARS,
    HypoSpaceTask,
    answer_lines,
    answer_region,
    check_int,
    match_observation,
)

MAX_NODES = 5  # 6 nodes have 3.8 million DAGs: too many to enumerate per observation set here.
NODE_NAMES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LABEL = re.compile(r"graph\s*:", re.IGNORECASE)
_ARROW = r"-+ ?>|=+>|[—–]+>|→|⟶|⇒|⟹|➔|➝|\\(?:to|rightarrow|Rightarrow|longrightarrow|Longrightarrow)(?![A-Za-z])"
_NOISE = r"[\[\]{}()`*\"'.$]|\\[()\[\]]"
_TOKEN = re.compile(rf"\s*(?:([A-Za-z]\w*)|({_ARROW})|([,;&])|({_NOISE}))\s*")
_SKIP = rf"(?:{_NOISE}|\s)*"
# How a line that continues the answer starts: a separator or an arrow (group 1, joined as is), or another edge.
_CONTINUATION = re.compile(rf"{_SKIP}(?:([,;&]|{_ARROW})|(?:and\s+)?[A-Za-z](?!\w){_SKIP}(?:{_ARROW}))", re.IGNORECASE)
# How an answer that must go on ends: with a separator or an arrow.
_OPEN_END = re.compile(rf"(?:[,;&]|\band|{_ARROW}){_SKIP}$", re.IGNORECASE)
OPEN_END_WINDOW = 256  # characters at the end of an answer where a trailing separator or arrow is looked for
_BULLET = re.compile(r"[-*•]\s+(?=[A-Za-z$\\(\[{`])")
_STRICT = re.compile(r"[A-Z] ?-> ?[A-Z](?:[,;] ?[A-Z] ?-> ?[A-Z])*")
_PAIR = re.compile(r"([A-Z]) ?-> ?([A-Z])")
_NO_EDGES = frozenset({"no edges", "no edge", "none", "empty", "empty graph", "∅", "{}", "[]"})


def _unbullet(line: str) -> str:
    """`line` without a leading list bullet (`- A->B`)."""
    bullet = _BULLET.match(line)
    return line[bullet.end() :] if bullet else line


def _descendants(n: int, edges: Iterable[tuple[int, int]]) -> tuple[int, ...] | None:
    """Descendant bitmask of every node, or None when the edges contain a cycle."""
    reach = [0] * n
    for u, v in edges:
        reach[u] |= 1 << v
    for _ in range(n):  # n rounds of closure are enough for paths of length <= n
        reach = [r | _union(reach, r) for r in reach]
    return None if any(reach[v] >> v & 1 for v in range(n)) else tuple(reach)


def _union(reach: list[int], mask: int) -> int:
    out = 0
    while mask:
        low = mask & -mask
        out |= reach[low.bit_length() - 1]
        mask ^= low
    return out


def _edge_key(edges: Iterable[tuple[int, int]]) -> str:
    return ";".join(sorted(f"{NODE_NAMES[u]}->{NODE_NAMES[v]}" for u, v in edges))


@lru_cache(maxsize=16)
def all_dags(n: int, max_edges: int) -> dict[str, tuple[int, ...]]:
    """Every DAG on n nodes with at most `max_edges` edges: canonical key -> descendant bitmasks."""
    pairs = list(itertools.combinations(range(n), 2))
    dags = {}
    for orientation in itertools.product((0, 1, 2), repeat=len(pairs)):  # absent, u->v, v->u per pair
        edges = [(u, v) if o == 1 else (v, u) for (u, v), o in zip(pairs, orientation, strict=True) if o]
        if len(edges) > max_edges:
            continue
        reach = _descendants(n, edges)
        if reach is not None:
            dags[_edge_key(edges)] = reach
    return dags


class CausalTask(HypoSpaceTask):
    """HypoSpace causal discovery with `nodes` nodes, at most `max_edges` edges, k in `observations`."""

    domain = "causal"
    answer_label = "Graph:"
    behavior_dims = 2
    behavior_names = ("edge_fraction", "forward_edge_share")

    def __init__(
        self,
        nodes: int = 3,
        max_edges: int | None = None,
        observations: Sequence[int] | None = None,
        format_reward: float = 0.0,
    ) -> None:
        super().__init__(format_reward)
        self.nodes = check_int("nodes", nodes, 2, MAX_NODES)
        max_pairs = nodes * (nodes - 1) // 2
        self.max_edges = max_pairs if max_edges is None else check_int("max_edges", max_edges, 0, max_pairs)
        ks = list(range(1, nodes + 1)) if observations is None else list(observations)
        if not ks:
            raise ValueError("observations must list at least one k")
        self.observation_counts = sorted({check_int("observations (k)", k, 1, nodes) for k in ks})
        self.node_names = NODE_NAMES[:nodes]
        self._node_index = {name: i for i, name in enumerate(self.node_names)}
        self._dags = all_dags(self.nodes, self.max_edges)
        effects = " ".join(f"{name}:([01])" for name in self.node_names)
        self._observation = re.compile(rf"Perturb\(([{self.node_names}])\) -> {effects}")

    @property
    def params(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "max_edges": self.max_edges, "observations": self.observation_counts}

    @property
    def tag(self) -> str:
        return f"n{self.nodes}-e{self.max_edges}-k{''.join(map(str, self.observation_counts))}"

    def hypothesis_space(self) -> list[str]:
        """Every DAG of the space as a canonical key."""
        return sorted(self._dags)

    def enumerate(self) -> Iterable[tuple[list[str], list[str]]]:
        for k in self.observation_counts:
            for perturbed in itertools.combinations(range(self.nodes), k):
                groups: dict[tuple[int, ...], list[str]] = {}
                for key, reach in self._dags.items():
                    groups.setdefault(tuple(reach[v] for v in perturbed), []).append(key)
                for signature in sorted(groups):
                    lines = [self._line(v, mask) for v, mask in zip(perturbed, signature, strict=True)]
                    yield lines, sorted(groups[signature])

    def _line(self, node: int, descendants: int) -> str:
        """The observation line of perturbing `node` in a graph where it has `descendants` (bitmask)."""
        effects = " ".join(f"{name}:{descendants >> i & 1}" for i, name in enumerate(self.node_names))
        return f"Perturb({self.node_names[node]}) -> {effects}"

    # -- reading answers ---------------------------------------------------------------------------------
    def read_answer(self, text: str) -> str | None:
        answer = self._answer(text)
        if answer is None:
            return None
        if _STRICT.fullmatch(answer):  # fast path: the exact answer format
            key = ";".join(sorted({f"{u}->{v}" for u, v in _PAIR.findall(answer)}))
            return key if key in self._dags else None
        if answer.rstrip(".").strip().lower() in _NO_EDGES:
            return "" if "" in self._dags else None
        edges = self._tolerant_edges(answer)
        if not edges:
            return None
        key = _edge_key(edges)
        return key if key in self._dags else None

    def _answer(self, text: str) -> str | None:
        """The first non-blank line after the label joined with the lines that continue it (edges separated by
        ", "); None when that runs past MAX_ANSWER_CHARS."""
        lines = answer_lines(answer_region(text, _LABEL))
        answer = _unbullet(next(lines, ""))
        for line in lines:
            if len(answer) > MAX_ANSWER_CHARS:
                return None
            line = _unbullet(line)
            continuation = _CONTINUATION.match(line)
            # the open end sits at the end of what was read so far: searching only its tail keeps this linear
            if _OPEN_END.search(answer[-OPEN_END_WINDOW:]) or continuation and continuation.group(1):
                answer += " " + line
            elif continuation:
                answer += ", " + line
            else:
                break
        return answer if len(answer) <= MAX_ANSWER_CHARS else None

    def _tolerant_edges(self, line: str) -> set[tuple[int, int]] | None:
        """Edges of `chain (separator chain)*` where chain = node (arrow node)+; None if anything else."""
        edges: set[tuple[int, int]] = set()
        state = "start"  # start | arrow (arrow required) | more (arrow or separator) | target (node required)
        source = -1
        pos = 0
        while pos < len(line):
            match = _TOKEN.match(line, pos)
            if match is None:
                return None
            pos = match.end()
            word, arrow, separator = match.group(1), match.group(2), match.group(3)
            if word is not None and word.lower() == "and":
                word, separator = None, word
            if word is not None:
                node = self._node_index.get(word.upper()) if len(word) == 1 else None
                if node is None or state not in ("start", "target") or node == source and state == "target":
                    return None
                if state == "target":
                    edges.add((source, node))
                source, state = node, "arrow" if state == "start" else "more"
            elif arrow is not None:
                if state not in ("arrow", "more"):
                    return None
                state = "target"
            elif separator is not None:
                if state not in ("more", "start"):
                    return None
                state = "start"
        return edges if state in ("more", "start") else None

    def is_hypothesis(self, hypothesis: Any) -> bool:
        return isinstance(hypothesis, str) and hypothesis in self._dags

    def read_observation(self, line: Any) -> tuple[int, int]:
        """(perturbed node, bitmask of the nodes reading 1) of `Perturb(A) -> A:0 B:1 C:0` over this task's nodes."""
        match = match_observation(self.domain, self._observation, line, self._line(0, 0))
        return self._node_index[match.group(1)], sum(int(v) << i for i, v in enumerate(match.groups()[1:]))

    def reproduces(self, hypothesis: str, observations: Sequence[tuple[int, int]]) -> bool:
        reach = self._dags[hypothesis]
        return all(reach[node] == ones for node, ones in observations)

    def describe(self, hypothesis: str) -> tuple[float, ...]:
        edges = hypothesis.split(";") if hypothesis else []
        forward = sum(edge[0] < edge[-1] for edge in edges)
        return (
            len(edges) / self.max_edges if self.max_edges else 0.0,
            forward / len(edges) if edges else 0.5,
        )

    # -- prompts ---------------------------------------------------------------------------------------
    def rules(self) -> str:
        nodes = ", ".join(self.node_names)
        return (
            f"Causal discovery. Nodes: {nodes}. A hypothesis is a directed acyclic graph on these nodes with at "
            f"most {self.max_edges} edges. Perturbing a node sets it to 0; every node it causes directly or "
            "indirectly (its descendants) then reads 1, and every other node reads 0."
        )

    def observation_block(self, observations: Sequence[str]) -> str:
        return "Observations:\n" + "\n".join(observations)

    def render_answer(self, hypothesis: str) -> str:
        return "Graph: " + (", ".join(hypothesis.split(";")) if hypothesis else "No edges")

    def format_example(self) -> str:
        return "Graph: A->B, B->C\n(or, for a graph without edges: Graph: No edges)"
