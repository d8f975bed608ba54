"""FlowRL (Zhu et al. 2025, "FlowRL: Matching Reward Distributions for LLM Reasoning") inside DivRLTrainer.

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

from typing import Any

import torch
from transformers import TrainerCallback

from divrl.core.flowrl import TrajectoryBalanceTerms, trajectory_balance_terms
from divrl.core.masked import masked_mean
from divrl.methods.flowrl import FLOWRL_LOG_Z_DROPOUT, FLOWRL_LOG_Z_LAYERS, FlowRLConfig  # noqa: F401 (re-exported)
from divrl.trainers.metrics import log_global_means


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


class _LogZHeadCallback(TrainerCallback):
    """Syncs and clips the head's gradients before each optimizer step and clears them after it (the Trainer's
    `model.zero_grad()` does not reach the head)."""

    def __init__(self, trainer: FlowRLMixin) -> None:
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
        self.trainer.prepare_log_z_gradients()

    def on_optimizer_step(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
        self.trainer.log_z_head.zero_grad(set_to_none=True)


class FlowRLMixin:
    """FlowRL for a GRPOTrainer subclass (DivRLTrainer); inert unless `args.flowrl`.

    Host contract (DivRLTrainer provides it): `ref_per_token_logps` is in the inputs whenever `args.flowrl`, and
    the host's `_get_per_token_logps_and_entropies` leaves the loss forward's outputs in `self._loss_forward`,
    and `_causal_lm(model)` unwraps the causal LM.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log_z_head: LogZHead | None = None
        if self.args.flowrl:
            self._setup_flowrl()

    def _setup_flowrl(self) -> None:
        """Refuse what the head cannot live with, build it (seeded), hook the backbone, register the callback."""
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            raise ValueError("DivRLConfig.flowrl is not supported under DeepSpeed or FSDP: its log Z head lives "
                             "outside the sharded model (use DDP, optionally with LoRA)")
        if self.optimizer is not None:
            raise ValueError("DivRLConfig.flowrl adds the log Z head to the optimizer the trainer builds: pass "
                             "optimizer_cls_and_kwargs instead of a ready-made optimizer in `optimizers`")
        hidden_size = self._causal_lm(self.model).config.get_text_config().hidden_size
        args = self.args
        with torch.random.fork_rng(devices=[]):  # identical on every process, independent of earlier draws
            torch.manual_seed(args.seed)
            head = LogZHead(hidden_size, args.flowrl_log_z_layers, args.flowrl_log_z_width, args.flowrl_log_z_dropout)
        self.log_z_head = head.to(self.accelerator.device)
        self.add_callback(_LogZHeadCallback(self))

    # ------------------------------------------------------------------------------ optimizer
    def create_optimizer(self, *args: Any, **kwargs: Any):  # noqa: D102 (Trainer hook)
        optimizer = super().create_optimizer(*args, **kwargs)
        head = self.log_z_head
        in_optimizer = {id(p) for group in optimizer.param_groups for p in group["params"]}
        if head is not None and id(next(head.parameters())) not in in_optimizer:
            lr = self.args.learning_rate if self.args.flowrl_log_z_lr is None else self.args.flowrl_log_z_lr
            decay = set(self.get_decay_parameter_names(head))
            named = list(head.named_parameters())
            for weight_decay, params in ((self.args.weight_decay, [p for n, p in named if n in decay]),
                                         (0.0, [p for n, p in named if n not in decay])):
                optimizer.add_param_group({"params": params, "lr": lr, "weight_decay": weight_decay})
        return optimizer

    def prepare_log_z_gradients(self) -> None:
        """Average the head's gradients over processes (it is not DDP-wrapped) and clip them to max_grad_norm."""
        params = list(self.log_z_head.parameters())
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            if self.accelerator.num_processes > 1:
                param.grad.copy_(self.accelerator.reduce(param.grad, reduction="mean"))
        if self.args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, self.args.max_grad_norm)

    # ----------------------------------------------------------------------------------- loss
    def _compute_loss(self, model, inputs):  # noqa: D102 (TRL hook)
        if self.log_z_head is None:
            return super()._compute_loss(model, inputs)
        if "pixel_values" in inputs:
            raise ValueError("DivRLConfig.flowrl supports text prompts only: the log Z head's prompt pass does not "
                             "take images")
        mode = "train" if self.model.training else "eval"
        self.log_z_head.train(mode == "train")
        # TRL's loss without its surrogate: the beta KL term, entropy bonus and aux loss only
        loss = super()._compute_loss(model, {**inputs, "advantages": torch.zeros_like(inputs["advantages"])})
        per_token_logps = self._loss_forward[0]
        mask = inputs["completion_mask"].to(per_token_logps.dtype)
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        lengths = mask.sum(1)
        advantages = inputs["advantages"]
        if advantages.dim() == 2:  # token-level advantages: their mean over the completion, as FlowRL's code
            advantages = masked_mean(advantages, mask, 1)
        old = inputs.get("old_per_token_logps")
        pooled = self._pooled_prompts(model, inputs["prompt_ids"], inputs["prompt_mask"])
        with torch.autocast(device_type=pooled.device.type, enabled=False):  # the head trains in float32
            log_z = self.log_z_head(pooled)
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
        self._log_flowrl(mode, log_z, terms, per_sequence, valid)
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        return loss + per_sequence.sum() / valid.sum().clamp(min=1.0) / accumulation

    def _pooled_prompts(self, model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """(B, hidden) float32: the backbone's last hidden states averaged over each row's (left-padded) prompt tokens.

        Each distinct prompt runs once (a GRPO batch repeats it G times) and is indexed out to its rows, so the
        gradient of every row's log Z reaches the one pass. Prompt positions never attend to the completion, so
        this equals the prompt part of the loss forward up to float summation order."""
        backbone = self._causal_lm(model).base_model
        distinct, rows = torch.unique(torch.cat([prompt_ids, prompt_mask], dim=1), dim=0, return_inverse=True)
        ids, mask = distinct[:, : prompt_ids.shape[1]], distinct[:, prompt_ids.shape[1] :]
        hidden = backbone(input_ids=ids, attention_mask=mask, use_cache=False).last_hidden_state.to(torch.float32)
        return masked_mean(hidden, mask.unsqueeze(-1), 1)[rows]

    def _log_flowrl(self, mode: str, log_z: torch.Tensor, terms: TrajectoryBalanceTerms,
                    per_sequence: torch.Tensor, valid: torch.Tensor) -> None:
        """Log means over the global batch's valid completions: log Z, |residual|, importance weight and the
        per-sequence loss (before gradient-accumulation scaling)."""
        log_global_means(self.accelerator, self._metrics[mode], {
            "flowrl/log_z": (log_z * valid).sum(), "flowrl/residual": (terms.residual.abs() * valid).sum(),
            "flowrl/importance_weight": (terms.weight * valid).sum(), "flowrl/loss": per_sequence.sum()}, valid.sum())

    # ----------------------------------------------------------------------------- checkpoints
