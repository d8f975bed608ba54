"""DPH-RL (the DPH-RL paper): a divergence to the initial (reference) policy added to the loss, mass-covering
forward KL or Jensen-Shannon rather than GRPO's reverse KL, estimated on the policy's own samples or on
pre-sampled reference completions ('rehearsal') (`divrl.core.per_token_divergence`,
`divrl.core.policy_sample_divergence_loss`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import per_token_divergence, policy_sample_divergence_loss
from divrl.core.divergence import DIVERGENCES, truncated_importance_weights
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check, check_choice
from divrl.methods.base import Card, LossStep, Method, Stage, register
from divrl.methods.rehearsal import RehearsalSet

DIVERGENCE_ESTIMATORS = ("policy", "rehearsal")


@dataclass
class DivergenceConfig:
    """The divergence fields of `DivRLConfig`."""

    divergence: str | None = field(default=Unset(None), metadata=_help(
        "Divergence to the reference (initial) policy added to the loss: 'reverse_kl', 'forward_kl', 'js' or "
        "'alpha' (the DPH-RL paper recommends the mass-covering forward_kl / js). Adds to TRL's `beta` k3 term; set "
        "beta=0 to replace it. On policy samples the loss carries the score-function term, so each option "
        "trains its own divergence (TRL's k3 used as a loss has the forward KL's gradient: 'reverse_kl' here is "
        "the true reverse KL, not TRL's beta). Default None (off)."))
    divergence_coef: float = field(default=0.05, metadata=_help(
        "Coefficient of the divergence term (the DPH-RL paper sweeps it; no single value). Default 0.05."))
    divergence_alpha: float = field(default=0.5, metadata=_help(
        "alpha of the alpha-divergence (0 -> reverse KL, 1 -> forward KL; the DPH-RL paper's family, 0.5 = the "
        "midpoint, a divrl choice). Default 0.5."))
    divergence_estimator: str = field(default="policy", metadata=_help(
        "'policy': estimate on the policy's own samples (no extra generation; weighted by pi / pi_sampler when "
        "the batch was sampled by an older policy or by vLLM); "
        "'rehearsal': on pre-sampled reference completions with stored reference log-probs (the DPH-RL paper; build "
        "them with `divrl sample-reference`). Default 'policy'."))
    divergence_rehearsal_path: str | None = field(default=None, metadata=_help(
        "Directory written by `divrl sample-reference` (needed by divergence_estimator='rehearsal'; the DPH-RL paper's "
        "reference-sample estimator). Default None."))
    divergence_rehearsal_batch_size: int = field(default=4, metadata=_help(
        "Rehearsal completions per micro-batch and process (one extra policy forward over them per step; "
        "divrl choice). Default 4."))

    @property
    def divergence_enabled(self) -> bool:
        """Whether a divergence term to the reference policy is added to the loss."""
        return self.divergence is not None and self.divergence_coef > 0


@register
class Divergence(Method):
    """LOSS: coef x the masked token mean of the per-token divergence, scaled for gradient accumulation. One
    instance per trainer: the rehearsal rows are one stream that every policy of a population reads on."""

    name = "divergence"
    switch = "divergence"
    stage = Stage.LOSS
    order = 10
    Config = DivergenceConfig
    card = Card("DPH-RL", "dph-rl", papers.DPH_RL)
    preset = {"divergence": "js"}
    state_key = "rehearsal_cursor"  # the next rehearsal row
    empty_state = 0
    shared = True

    def __init__(self, args: Any, hooks: Any) -> None:
        super().__init__(args, hooks)
        self.rehearsal = None
        self.cursor = 0
        if args.divergence_estimator == "rehearsal":
            self.rehearsal = RehearsalSet(args.divergence_rehearsal_path, args.temperature)

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.divergence_enabled

    @classmethod
    def validate(cls, args: Any) -> None:
        check_choice("divergence_estimator", args.divergence_estimator, DIVERGENCE_ESTIMATORS)
        if args.divergence is not None:
            check_choice("divergence", args.divergence, DIVERGENCES)
        check(args.divergence_coef >= 0, "divergence_coef", f"must be >= 0, got {args.divergence_coef}")
        check(args.divergence_rehearsal_batch_size >= 1, "divergence_rehearsal_batch_size",
              f"must be >= 1, got {args.divergence_rehearsal_batch_size}")
        if args.divergence is not None and args.divergence_estimator == "rehearsal":
            check(args.divergence_rehearsal_path is not None, "divergence_rehearsal_path",
                  "is required by divergence_estimator='rehearsal' (create it with `divrl sample-reference`)")

    @classmethod
    def needs_reference_logps(cls, args: Any) -> bool:
        return args.divergence_estimator == "policy"

    def has_state(self) -> bool:
        return self.rehearsal is not None

    def state_dict(self) -> Any:
        return self.cursor

    def load_state_dict(self, state: Any) -> None:
        self.cursor = int(state)

    def loss_term(self, step: LossStep) -> torch.Tensor | None:
        if self.rehearsal is None:
            per_token = policy_sample_divergence_loss(
                step.per_token_logps, step.inputs["ref_per_token_logps"], self.args.divergence,
                self.args.divergence_alpha, sample_weight=_behaviour_correction(step))
            return self._term(step, per_token, step.mask, step.mode)
        if step.mode != "train":
            return None
        return self._rehearsal_term(step)

    def _term(self, step: LossStep, per_token: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
        """coef x masked token mean of the per-token divergence, scaled for gradient accumulation; logs it."""
        mask = mask.to(per_token.dtype)
        value = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
        step.context.log_means(mode, {f"divergence/{self.args.divergence}": (per_token * mask).sum()}, mask.sum())
        return self.args.divergence_coef * value / step.accumulation

    def _rehearsal_term(self, step: LossStep) -> torch.Tensor:
        """The divergence estimated on the next rehearsal rows (reference samples): one extra policy forward."""
        context = step.context
        accelerator = context.accelerator
        size = self.args.divergence_rehearsal_batch_size
        start = self.cursor + accelerator.process_index * size
        batch = self.rehearsal.batch(range(start, start + size), context.pad_token_id)
        self.cursor = (self.cursor + size * accelerator.num_processes) % len(self.rehearsal)
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        policy_logps = context.policy_logps(step.model, batch)
        return self.reference_samples_term(step, policy_logps, batch["ref_logps"].to(policy_logps.dtype),
                                           batch["completion_mask"])

    def reference_samples_term(self, step: LossStep, policy_logps: torch.Tensor, reference_logps: torch.Tensor,
                               mask: torch.Tensor) -> torch.Tensor:
        """The loss term on completions sampled from the reference (the DPH-RL paper's estimator): the rehearsal rows
        here, the reference's own samples in the toy backend. `policy_logps` / `reference_logps` are their per-token
        log-probs under the policy and the reference, `mask` their completion tokens."""
        per_token = per_token_divergence(policy_logps, reference_logps, self.args.divergence, "reference",
                                         self.args.divergence_alpha)
        return self._term(step, per_token, mask, "train")


def _behaviour_correction(step: LossStep) -> torch.Tensor | None:
    """pi / pi_sampler per token (detached): the batch was sampled by an older policy (several optimizer steps per
    generation) and/or by vLLM (TRL's importance_sampling_ratio, already bounded by TRL); None when it is
    on-policy. pi / pi_old is truncated as TRL bounds its own ratio: to [1 - epsilon, 1 + epsilon_high], or at
    epsilon_high for CISPO (`divrl.core.truncated_importance_weights`), which bounds the estimate's variance."""
    context, inputs = step.context, step.inputs
    weight = None
    if inputs.get("old_per_token_logps") is not None:
        low, high = ((None, context.epsilon_high) if context.loss_type == "cispo"
                     else (max(0.0, 1 - context.epsilon_low), 1 + context.epsilon_high))
        weight = truncated_importance_weights(step.per_token_logps - inputs["old_per_token_logps"], low, high)
    if inputs.get("importance_sampling_ratio") is not None:
        ratio = inputs["importance_sampling_ratio"]
        weight = ratio if weight is None else weight * ratio
    return weight
