"""divrl's diversity methods, one file each, in one registry (`divrl.methods.base`).

Importing this package registers every method of `METHOD_MODULES`, in that order: the model card lists methods in
it. To add a method, write one file like `count_bonus.py` (its config dataclass and a `@register`ed `Method`
subclass whose stage hook calls a pure function of `divrl.core`) and add its module name to `METHOD_MODULES`;
README "Add a method" walks through one.
"""

import importlib
from dataclasses import dataclass, fields
from typing import Any

from divrl.methods._fields import Unset
from divrl.methods.base import (
    REGISTRY,
    AdvantageStep,
    Card,
    EntropyBonus,
    LossContext,
    LossStep,
    Method,
    RewardStep,
    Stage,
    active,
    configurable,
    counts_outcomes,
    group_scaled,
    load_method_states,
    method_states,
    methods,
    presets_of,
    register,
)

# Registration order = model-card order (outcome keys first: they feed the methods that count outcomes).
METHOD_MODULES = ("outcome_keys", "ips", "qd", "maxent_entropy", "novelty", "length_bins", "divergence", "population",
                  "flowrl", "reinvent", "set_diversity", "replay", "count_bonus", "unlikeliness", "passk", "covariance",
                  "zero_flat_groups")
for _module in METHOD_MODULES:
    importlib.import_module(f"divrl.methods.{_module}")


def config_classes() -> tuple[type, ...]:
    """Every method's config dataclass, in registration order (the bases of `DivRLConfig`)."""
    return tuple(method.Config for method in REGISTRY.values())


def method_args(**values: Any) -> Any:
    """Every registered method's fields at their defaults, `values` set: the `args` a backend other than
    DivRLTrainer (the toy backend) gives the method objects. Unknown names raise a TypeError naming them."""
    args_class = dataclass(type("MethodArgs", config_classes(), {}))
    args = args_class(**values)
    for spec in fields(args):
        value = getattr(args, spec.name)
        if isinstance(value, Unset):
            setattr(args, spec.name, value.value)
    return args


__all__ = ["METHOD_MODULES", "REGISTRY", "AdvantageStep", "Card", "EntropyBonus", "LossContext", "LossStep", "Method",
           "RewardStep", "Stage", "active", "config_classes", "configurable", "counts_outcomes", "group_scaled",
           "load_method_states", "method_args", "method_states", "methods", "presets_of", "register"]
