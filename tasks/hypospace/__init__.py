"""HypoSpace tasks (Chen et al. 2025) as divrl tasks: causal DAGs, 3D voxels and Boolean expressions.

`make_task("causal", nodes=4, max_edges=6, observations=[3])` (or the class directly) gives a task with
exhaustive instances, splits, prompts, TRL reward functions, IPS outcome keys and QD descriptors; see
`common` for what the domains share and each domain module for its semantics and documented fixes.
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
