"""Groups without signal (divrl): every completion of a group whose summed reward is the same for all of them gets
advantage exactly 0 (`divrl.core.flat_rows`), where TRL's fp32 normalisation would leave a same-signed residue."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import flat_rows
from divrl.methods._fields import _help
from divrl.methods.base import AdvantageStep, Method, Stage, register


@dataclass
class ZeroFlatGroupsConfig:
    """The zero_flat_groups field of `DivRLConfig`."""

    zero_flat_groups: bool = field(default=False, metadata=_help(
        "Give every completion of a group whose summed (post-shaping) reward is the same for all of them advantage "
        "exactly 0 (`core.flat_groups`: max - min within 1e-6 relative). Without it, TRL's fp32 normalisation "
        "leaves such a group a same-signed residue (eight rewards of 1.2: +1.2e-3 each), a small push toward "
        "whatever was sampled on every step where all completions are equally good. divrl choice; off by default so "
        "that runs match GRPOConfig's. Default False."))


@register
class ZeroFlatGroups(Method):
    """ADVANTAGE (training batches), after any method that replaces the advantages."""

    name = "zero_flat_groups"
    switch = "zero_flat_groups"
    stage = Stage.ADVANTAGE
    order = 20
    Config = ZeroFlatGroupsConfig

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.zero_flat_groups)

    def zeroed_rows(self, step: AdvantageStep) -> torch.Tensor:
        return flat_rows(step.summed.cpu(), step.group)
