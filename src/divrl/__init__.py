"""divrl: reinforcement-learning fine-tuning of LLMs without diversity collapse.

`import divrl` stays light: trainers (which pull in trl/transformers) load on first attribute access.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# Public name -> module that defines it; resolved lazily by __getattr__.
_LAZY_EXPORTS: dict[str, str] = {
    "DivRLConfig": "divrl.trainers.config",
    "DivRLTrainer": "divrl.trainers.divrl_trainer",
    "DiversityState": "divrl.trainers.divrl_trainer",
    "IPSGRPOTrainer": "divrl.trainers.presets",
    "QDGRPOTrainer": "divrl.trainers.presets",
    "MaxEntGRPOTrainer": "divrl.trainers.presets",
    "DivergenceGRPOTrainer": "divrl.trainers.presets",
    "PopulationGRPOTrainer": "divrl.trainers.presets",
    "FlowRLTrainer": "divrl.trainers.presets",
    "CountBonusGRPOTrainer": "divrl.trainers.presets",
    "UnlikelinessGRPOTrainer": "divrl.trainers.presets",
    "PassAtKGRPOTrainer": "divrl.trainers.presets",
    "sample_reference": "divrl.trainers.rehearsal",
}


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'divrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY_EXPORTS])
