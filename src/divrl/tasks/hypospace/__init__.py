"""HypoSpace tasks (Chen et al. 2025) as divrl tasks: causal DAGs, 3D voxels and Boolean expressions.

`make_task("causal", nodes=4, max_edges=6, observations=[3])` (or the class directly) gives a task with
exhaustive instances, splits, prompts, TRL reward functions, IPS outcome keys and QD descriptors; see
`common` for what the domains share and each domain module for its semantics.

Deliberate deviations from the HypoSpace reference code (details in the domain modules):
- boolean: one depth definition (smallest generation depth of any expression with the same mechanistic
  key) used by generator and validator alike; the reference counted NOR(x, y) as depth 1 when generating
  and depth 2 when validating;
- boolean: the allowed-operator check applies to the operators an answer writes, so NOT (x OR y) is valid
  without NOR in the operator set (the reference rewrote it to NOR and rejected it);
- boolean: answers are parsed by our own grammar, never by sympy's sympify (which evaluates Python);
- voxel: the maximum height is enforced (the reference never checked it).
"""

from __future__ import annotations

from typing import Any

from divrl.tasks.hypospace.boolean import BooleanTask
from divrl.tasks.hypospace.causal import CausalTask
from divrl.tasks.hypospace.common import HypoSpaceTask, Instance, read_jsonl, split_instances, write_jsonl
from divrl.tasks.hypospace.voxel import VoxelTask

DOMAINS: dict[str, type[HypoSpaceTask]] = {"causal": CausalTask, "voxel": VoxelTask, "boolean": BooleanTask}


def make_task(domain: str, **params: Any) -> HypoSpaceTask:
    """The task of `domain` ("causal", "voxel", "boolean" or "hypospace-<domain>") with `params`."""
    name = domain.removeprefix("hypospace-")
    if name not in DOMAINS:
        raise ValueError(f"unknown HypoSpace domain {domain!r}; choose one of {sorted(DOMAINS)}")
    return DOMAINS[name](**params)


__all__ = [
    "DOMAINS",
    "BooleanTask",
    "CausalTask",
    "HypoSpaceTask",
    "Instance",
    "VoxelTask",
    "make_task",
    "read_jsonl",
    "split_instances",
    "write_jsonl",
]
