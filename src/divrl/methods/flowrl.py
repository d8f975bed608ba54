"""FlowRL (Zhu et al. 2025, "FlowRL: Matching Reward Distributions for LLM Reasoning"; the IPS paper's baseline):
its fields and its OBJECTIVE stage inside DivRLTrainer.

The trajectory-balance loss of `divrl.core.flowrl.trajectory_balance_loss` replaces GRPO's clipped surrogate:
per sequence y of prompt x, w * (log Z_phi(x) + (1/|y|) log pi(y|x) - beta_r r_hat - (1/|y|) log pi_ref(y|x))^2,
averaged over the micro-batch's completions and divided by the gradient-accumulation steps, as TRL's "grpo" loss
(completions that TRL masks out entirely, e.g. by `mask_truncated_completions`, are left out).

Where each piece comes from (trl 1.16): only log Z needs a forward of its own, of the distinct prompts:
- r_hat: TRL's advantages (group-normalised rewards, after any IPS / QD / novelty shaping and length bins).
- log pi: the per-token log-probs of TRL's own loss forward (captured by the host, `DivRLTrainer`).
- log pi_ref: `ref_per_token_logps`, TRL's when beta != 0, else computed the same way by the host (adapter
  disabled under PEFT, otherwise a frozen copy of the initial policy).
- w: exp(sum_t log pi - log pi_old) clipped to [1 - clip, 1 + clip], with TRL's `old_per_token_logps`; TRL skips
  them when generation and optimisation are aligned (pi_old = pi), and then w = 1. With vLLM, TRL's
  sequence-level importance-sampling ratio (sampler vs. pi_old) multiplies the loss, as it does for GRPO.
- log Z_phi(x): `LogZHead`, FlowRL's ProjZ network, on the policy's last hidden states averaged over the prompt
  tokens, from one backbone pass per distinct prompt (the prompt part of the loss forward, which a CPU loss
  forward that shares each prompt across its group does not keep), NOT detached, as in FlowRL's reference code:
  the log Z loss also shapes the policy's prompt representation.
- TRL's `_compute_loss` still runs, on zeroed advantages: its surrogate is exactly 0, and it keeps adding what it
  adds around the surrogate (the beta KL term, the entropy bonus, a MoE aux loss) and its logging. Its
  `clip_ratio/*` metrics therefore read 0 and its `policy_loss` holds only the beta KL term; `flowrl/*` report
  FlowRL's part (`flowrl/importance_weight` shows FlowRL's own clipping).

The head stays outside the model, so a saved policy is a plain model or adapter: its parameters are extra groups
of the Trainer's optimizer (same LR schedule, Adam state in optimizer.pt), its gradients are averaged across
processes and clipped to `max_grad_norm` (on their own) before every optimizer step, and its weights are saved
in every checkpoint's `divrl_state.pt` and restored by `resume_from_checkpoint`. A population shares one head:
the target log Z(x) depends on the reference and the reward only, not on the member.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core.flowrl import FLOWRL_BETA, FLOWRL_IMPORTANCE_CLIP, TrajectoryBalanceTerms, trajectory_balance_terms
from divrl.core.masked import masked_mean
from divrl.methods import papers
from divrl.methods._fields import Unset, _help
from divrl.methods.base import Card, LossContext, LossStep, Method, Stage, register

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


class LogZHead(torch.nn.Module):
    """FlowRL's ProjZ network: (layers - 1) x [Linear, GELU, LayerNorm, Dropout], then Linear(width, 1).

    Maps a mean-pooled prompt representation (B, hidden) to log Z(x) (B,).
    """

    def __init__(self, in_features: int, layers: int = FLOWRL_LOG_Z_LAYERS, width: int | None = None,
                 dropout: float = FLOWRL_LOG_Z_DROPOUT) -> None:
        super().__init__()
        width = width or in_features
        blocks: list[torch.nn.Module] = []
        size = in_features
        for _ in range(layers - 1):
            blocks += [torch.nn.Linear(size, width), torch.nn.GELU(), torch.nn.LayerNorm(width),
                       torch.nn.Dropout(dropout)]
            size = width
        blocks.append(torch.nn.Linear(size, 1))
        self.net = torch.nn.Sequential(*blocks)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.net(pooled).squeeze(-1)


def _log_z_head_callback(objective: FlowRL) -> Any:
    """A TrainerCallback that syncs and clips the head's gradients before each optimizer step and clears them after it
    (the Trainer's `model.zero_grad()` does not reach the head). Built here so that importing the method registry does
    not import transformers (and through it peft)."""
    from transformers import TrainerCallback

    class LogZHeadCallback(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
            objective.prepare_head_gradients()

        def on_optimizer_step(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
            objective.head.zero_grad(set_to_none=True)

    return LogZHeadCallback()


@register
class FlowRL(Method):
    """OBJECTIVE: the trajectory-balance loss replaces GRPO's surrogate. One instance per trainer: a population
    shares the head (the target log Z(x) depends on the reference and the reward only). Its head is public as
    `trainer.log_z_head`."""

    name = "flowrl"
    switch = "flowrl"
    stage = Stage.OBJECTIVE
    Config = FlowRLConfig
    card = Card("FlowRL", "flowrl", papers.FLOWRL)
    preset = {"flowrl": True}
    shared = True

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.head: LogZHead | None = None
        self._accelerator: Any = None  # the trainer's, for the head's gradient reduction
        self._decay_parameter_names: Callable[[Any], list[str]] | None = None  # the Trainer's weight-decay rule

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.flowrl)

    @classmethod
    def validate(cls, args: Any) -> None:
        args.validate_flowrl()

    @classmethod
    def needs_reference_logps(cls, args: Any) -> bool:
        return True

    def configure_trainer(self, trainer: Any) -> None:
        """Refuse what the head cannot live with, build it (seeded), register its callback."""
        if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
            raise ValueError("DivRLConfig.flowrl is not supported under DeepSpeed or FSDP: its log Z head lives "
                             "outside the sharded model (use DDP, optionally with LoRA)")
        if trainer.optimizer is not None:
            raise ValueError("DivRLConfig.flowrl adds the log Z head to the optimizer the trainer builds: pass "
                             "optimizer_cls_and_kwargs instead of a ready-made optimizer in `optimizers`")
        hidden_size = trainer._causal_lm(trainer.model).config.get_text_config().hidden_size
        args = self.args
        with torch.random.fork_rng(devices=[]):  # identical on every process, independent of earlier draws
            torch.manual_seed(args.seed)
            head = LogZHead(hidden_size, args.flowrl_log_z_layers, args.flowrl_log_z_width, args.flowrl_log_z_dropout)
        self.head = head.to(trainer.accelerator.device)
        self._accelerator, self._decay_parameter_names = trainer.accelerator, trainer.get_decay_parameter_names
        trainer.log_z_head = self.head
        trainer.add_callback(_log_z_head_callback(self))

    def state_dict(self) -> Any:
        return self.head.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.head.load_state_dict(state)

    def add_to_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """The head's parameters as extra groups of the trainer's optimizer (its LR schedule, Adam state in
        optimizer.pt), weight decay as the Trainer decays its own parameters."""
        head, args = self.head, self.args
        if id(next(head.parameters())) in {id(p) for group in optimizer.param_groups for p in group["params"]}:
            return
        lr = args.learning_rate if args.flowrl_log_z_lr is None else args.flowrl_log_z_lr
        decay = set(self._decay_parameter_names(head))
        named = list(head.named_parameters())
        for weight_decay, params in ((args.weight_decay, [p for n, p in named if n in decay]),
                                     (0.0, [p for n, p in named if n not in decay])):
            optimizer.add_param_group({"params": params, "lr": lr, "weight_decay": weight_decay})

    def prepare_head_gradients(self) -> None:
        """Average the head's gradients over processes (it is not DDP-wrapped) and clip them to max_grad_norm."""
        params = list(self.head.parameters())
        accelerator = self._accelerator
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            if accelerator.num_processes > 1:
                param.grad.copy_(accelerator.reduce(param.grad, reduction="mean"))
        if self.args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)

    def surrogate_inputs(self, inputs: dict[str, Any], training: bool) -> dict[str, Any]:
        """What TRL's loss runs on: zeroed advantages, so that only its beta KL term, entropy bonus and aux loss
        remain (its surrogate is exactly 0)."""
        if "pixel_values" in inputs:
            raise ValueError("DivRLConfig.flowrl supports text prompts only: the log Z head's prompt pass does not "
                             "take images")
        self.head.train(training)
        return {**inputs, "advantages": torch.zeros_like(inputs["advantages"])}

    def objective_term(self, step: LossStep) -> torch.Tensor:
        """The trajectory-balance loss of the micro-batch: the mean over its valid completions, divided by the
        gradient-accumulation steps."""
        inputs, per_token_logps = step.inputs, step.per_token_logps
        mask = step.mask.to(per_token_logps.dtype)
        lengths = mask.sum(1)
        advantages = inputs["advantages"]
        if advantages.dim() == 2:  # token-level advantages: their mean over the completion, as FlowRL's code
            advantages = masked_mean(advantages, mask, 1)
        old = inputs.get("old_per_token_logps")
        pooled = self._pooled_prompts(step.context.causal_lm(step.model), inputs["prompt_ids"], inputs["prompt_mask"])
        with torch.autocast(device_type=pooled.device.type, enabled=False):  # the head trains in float32
            log_z = self.head(pooled)
        terms = trajectory_balance_terms(
            log_z,
            (per_token_logps * mask).sum(1),
            (inputs["ref_per_token_logps"] * mask).sum(1),
            lengths,
            advantages.to(per_token_logps.dtype),
            self.args.flowrl_beta,
            None if old is None else (old * mask).sum(1),
            self.args.flowrl_importance_clip,
        )
        # Completions TRL masks out entirely (mask_truncated_completions) take no part, as in TRL's loss.
        valid = (lengths > 0).to(per_token_logps.dtype)
        per_sequence = terms.weight * terms.residual**2 * valid
        if "importance_sampling_ratio" in inputs:  # vLLM sampler vs. pi_old, sequence-level (B, 1)
            per_sequence = per_sequence * inputs["importance_sampling_ratio"].squeeze(-1)
        self._log(step.context, step.mode, log_z, terms, per_sequence, valid)
        return per_sequence.sum() / valid.sum().clamp(min=1.0) / step.accumulation

    def _pooled_prompts(self, causal_lm: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """(B, hidden) float32: the backbone's last hidden states averaged over each row's (left-padded) prompt tokens.

        Each distinct prompt runs once (a GRPO batch repeats it G times) and is indexed out to its rows, so the
        gradient of every row's log Z reaches the one pass. Prompt positions never attend to the completion, so
        this equals the prompt part of the loss forward up to float summation order."""
        backbone = causal_lm.base_model
        distinct, rows = torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True)
        ids, mask = distinct[:, : prompt_ids.shape[1]], distinct[:, prompt_ids.shape[1] :]
        hidden = backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state.to(torch.float32)
        return masked_mean(hidden, mask.unsqueeze(-1), 1)[rows]

    def _log(self, context: LossContext, mode: str, log_z: torch.Tensor, terms: TrajectoryBalanceTerms,
             per_sequence: torch.Tensor, valid: torch.Tensor) -> None:
        """Log means over the global batch's valid completions: log Z, |residual|, importance weight and the
        per-sequence loss (before gradient-accumulation scaling)."""
        context.log_means(mode, {
            "flowrl/log_z": (log_z * valid).sum(), "flowrl/residual": (terms.residual.abs() * valid).sum(),
            "flowrl/importance_weight": (terms.weight * valid).sum(), "flowrl/loss": per_sequence.sum()}, valid.sum())
