"""`DivRLConfig`: TRL's `GRPOConfig` plus the diversity methods' fields, each with its default and paper.

Each method's fields live beside its code in `divrl.methods` (one file per method) and are merged here, so the
field names recipes and CLI flags use are the methods' own. Papers: README, "The methods".
Every method is off by default, so `DivRLConfig()` trains exactly like `GRPOConfig()`.
Misconfiguration raises `ValueError` naming the field, at construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from transformers import TrainingArguments
from trl import GRPOConfig

from divrl.methods import REGISTRY, Stage, active, config_classes, configurable
from divrl.methods._fields import Unset, check, check_choice
from divrl.trainers._fields import CONSOLE_LOGS, RunFields


@dataclass
class DivRLConfig(*config_classes(), RunFields, GRPOConfig):
    """GRPOConfig plus every registered method's fields (`divrl.methods`: IPS, QD, MaxEnt, divergences, ...) and
    divrl's own (`RunFields`: stop strings, console).

    Each method's fields, with their defaults and source papers, are documented in its file of `divrl.methods`.
    """

    # GRPOConfig turns activation checkpointing on through the name transformers 5 deprecates
    # (`gradient_checkpointing`, which then warns at every construction); divrl keeps that default under the new name.
    activation_checkpointing: bool | None = field(
        default=Unset(True), metadata=TrainingArguments.__dataclass_fields__["activation_checkpointing"].metadata)
    gradient_checkpointing: bool | None = field(
        default=None, metadata=TrainingArguments.__dataclass_fields__["gradient_checkpointing"].metadata)

    def __post_init__(self) -> None:
        self._resolve_unset()
        if "activation_checkpointing" in self._unset_fields and self.gradient_checkpointing is not None:
            self.activation_checkpointing = None  # only the old name was given: transformers maps it (and warns)
        super().__post_init__()
        self.validate()

    def _resolve_unset(self) -> None:
        """Give every field still holding its `Unset` default its value, and remember it as not set by the user."""
        unset = set(getattr(self, "_unset_fields", ()))
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, Unset):
                setattr(self, spec.name, value.value)
                unset.add(spec.name)
        self._unset_fields = unset

    def apply_preset(self, preset: dict[str, Any]) -> None:
        """Set the preset's fields that the user left unset (explicit values win, even ones equal to a default),
        then validate again."""
        self._resolve_unset()
        for name, value in preset.items():
            spec = self.__dataclass_fields__.get(name)
            if spec is None or not isinstance(spec.default, Unset):
                raise ValueError(f"DivRLConfig.{name} cannot take a preset: its default is not an Unset marker")
            if name in self._unset_fields:
                setattr(self, name, value)
                self._unset_fields.discard(name)
        self.validate()

    def validate(self) -> None:
        """Check the divrl fields (also re-run after a preset trainer switches its method on): each method's own
        checks, then the rules between methods."""
        for method in REGISTRY.values():
            if configurable(method, self):
                method.validate(self)
        check_choice("console_log", self.console_log, CONSOLE_LOGS)
        check(self.stop_strings is None or all(isinstance(s, str) and s for s in self.stop_strings),
              "stop_strings", f"must be a list of non-empty strings, got {self.stop_strings!r}")
        replacing = [m.switch for m in active(self, Stage.ADVANTAGE) if m.replaces_advantages]
        if len(replacing) > 1:
            check(False, replacing[-1], f"and {' and '.join(replacing[:-1])} both replace the advantages; choose one")
        for switch in replacing:
            check(self.multi_objective_aggregation == "sum_then_normalize", switch,
                  "needs multi_objective_aggregation='sum_then_normalize' (its advantages are computed from the "
                  "summed reward)")
        bonuses = [m.switch for m in active(self) if m.bonus]
        if bonuses:
            check(self.multi_objective_aggregation == "sum_then_normalize", "multi_objective_aggregation",
                  f"must be 'sum_then_normalize' with {' / '.join(bonuses)}: 'normalize_then_sum' would normalise the "
                  "bonus column on its own, so the bonus coefficients would lose their scale")

