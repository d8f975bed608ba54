"""FlowRL (Zhu et al. 2025; the baseline of the IPS paper): trajectory balance with a learned log Z replaces GRPO's
clipped surrogate. Its objective is `divrl.trainers.flowrl.FlowRLMixin` (the algorithm: `divrl.core.flowrl`); this
file declares its fields, card and preset."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from divrl.core.flowrl import FLOWRL_BETA, FLOWRL_IMPORTANCE_CLIP
from divrl.methods import papers
from divrl.methods.base import Card, Method, Stage, register
from divrl.trainers._fields import Unset, _help

# FlowRL's reference code: ProjZModule(hidden_size, num_layers=3, dropout=0.1), width = the model's hidden size.
FLOWRL_LOG_Z_LAYERS = 3
FLOWRL_LOG_Z_DROPOUT = 0.1


@dataclass
class FlowRLConfig:
    """The FlowRL fields of `DivRLConfig`, each with its default and source (Zhu et al. 2025 and its code)."""

    flowrl: bool = field(default=Unset(False), metadata=_help(
        "FlowRL (Zhu et al. 2025; the baseline of the IPS paper): the trajectory-balance loss with a learned log Z "
        "replaces GRPO's clipped surrogate. Default False."))
    flowrl_beta: float = field(default=FLOWRL_BETA, metadata=_help(
        "Reward scale beta_r of the residual (FlowRL's published value: 15). Default 15.0."))
    flowrl_importance_clip: float = field(default=FLOWRL_IMPORTANCE_CLIP, metadata=_help(
        "The sequence importance weight pi / pi_old is clipped to [1 - c, 1 + c] (FlowRL: 0.2). Default 0.2."))
    flowrl_log_z_layers: int = field(default=FLOWRL_LOG_Z_LAYERS, metadata=_help(
        "Linear layers of the log Z head (FlowRL's ProjZ: 3, i.e. two Linear-GELU-LayerNorm-Dropout blocks and "
        "a Linear to one output). Default 3."))
    flowrl_log_z_width: int | None = field(default=None, metadata=_help(
        "Width of the log Z head's hidden layers. Default None = the model's hidden size (as FlowRL)."))
    flowrl_log_z_dropout: float = field(default=FLOWRL_LOG_Z_DROPOUT, metadata=_help(
        "Dropout in the log Z head (FlowRL: 0.1). Default 0.1."))
    flowrl_log_z_lr: float | None = field(default=None, metadata=_help(
        "Learning rate of the log Z head. Default None = learning_rate (FlowRL trains the head with the policy's "
        "optimizer and learning rate)."))

    def validate_flowrl(self) -> None:  # noqa: D102
        """Raise a ValueError naming the field when a FlowRL field is out of range or clashes with TRL's."""
        checks = (
            (self.flowrl_beta > 0, "flowrl_beta", f"must be > 0, got {self.flowrl_beta}"),
            (0 <= self.flowrl_importance_clip < 1, "flowrl_importance_clip",
             f"must be in [0, 1), got {self.flowrl_importance_clip}"),
            (self.flowrl_log_z_layers >= 1, "flowrl_log_z_layers", f"must be >= 1, got {self.flowrl_log_z_layers}"),
            (self.flowrl_log_z_width is None or self.flowrl_log_z_width >= 1, "flowrl_log_z_width",
             f"must be None or >= 1, got {self.flowrl_log_z_width}"),
            (0 <= self.flowrl_log_z_dropout < 1, "flowrl_log_z_dropout",
             f"must be in [0, 1), got {self.flowrl_log_z_dropout}"),
            (self.flowrl_log_z_lr is None or self.flowrl_log_z_lr >= 0, "flowrl_log_z_lr",
             f"must be None or >= 0, got {self.flowrl_log_z_lr}"),
        )
        for ok, name, problem in checks:
            if not ok:
                raise ValueError(f"DivRLConfig.{name} {problem}")
        if self.flowrl and (self.scale_rewards != "group"
                            or self.multi_objective_aggregation != "sum_then_normalize"):
            raise ValueError(
                f"DivRLConfig.flowrl needs the group-normalised reward r_hat = (r - mean) / std per group, which "
                f"flowrl_beta is calibrated for: use scale_rewards='group' (got {self.scale_rewards!r}) and "
                f"multi_objective_aggregation='sum_then_normalize' (got {self.multi_objective_aggregation!r})")
        if (self.flowrl and self.use_vllm and self.vllm_importance_sampling_correction
                and not self.vllm_importance_sampling_mode.startswith("sequence")):
            raise ValueError(
                f"DivRLConfig.vllm_importance_sampling_mode {self.vllm_importance_sampling_mode!r} gives per-token "
                "ratios, but the FlowRL loss is per sequence: use 'sequence_mask' or 'sequence_truncate' with "
                "flowrl=True")


@register
class FlowRL(Method):
    """OBJECTIVE: the trajectory-balance loss replaces GRPO's surrogate (`divrl.trainers.flowrl.FlowRLMixin`)."""

    name = "flowrl"
    switch = "flowrl"
    stage = Stage.OBJECTIVE
    Config = FlowRLConfig
    card = Card("FlowRL", "flowrl", papers.FLOWRL)
    preset = {"flowrl": True}

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.flowrl)

    @classmethod
    def validate(cls, args: Any) -> None:
        args.validate_flowrl()

    @classmethod
    def needs_reference_logps(cls, args: Any) -> bool:
        return True
