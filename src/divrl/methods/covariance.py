"""Covariance-targeted entropy control (the entropy-mechanism paper, Cui et al. 2025; verl's clip_cov / kl_cov
policy losses): the tokens whose covariance between log-prob and advantage is largest drive entropy down, so
Clip-Cov stops their policy gradient and KL-Cov penalises their drift from the sampling policy
(`divrl.core.token_covariance`, `clip_cov_selection`, `kl_cov_selection`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core import clip_cov_selection, kl_cov_selection, ppo_clipped, token_covariance
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check, check_choice
from divrl.methods.base import Card, LossContext, LossStep, Method, Stage, register

COVARIANCE_METHODS = ("clip_cov", "kl_cov")
_CARDS = {"clip_cov": Card("Clip-Cov", "clip-cov", papers.ENTROPY_MECHANISM),
          "kl_cov": Card("KL-Cov", "kl-cov", papers.ENTROPY_MECHANISM)}


@dataclass
class CovarianceConfig:
    """The Clip-Cov / KL-Cov fields of `DivRLConfig`."""

    cov_method: str | None = field(default=Unset(None), metadata=_help(
        "'clip_cov': stop the policy gradient of a random cov_ratio share of the completion tokens whose "
        "covariance (A - mean A)(log pi - mean log pi) lies in cov_clip_bounds (tokens PPO's clip already stops "
        "excluded); 'kl_cov': add cov_kl_coef |log pi - log pi_old| on the top cov_ratio share of tokens by "
        "covariance (acts only when a batch is reused: num_iterations > 1, or steps_per_generation > "
        "gradient_accumulation_steps, or vLLM's importance correction; TRL's clipped surrogate is kept where verl's "
        "kl_cov drops the clip). Default None (off)."))
    cov_ratio: float = field(default=2e-4, metadata=_help(
        "Share of completion tokens Clip-Cov / KL-Cov act on (at least one per micro-batch; verl's default 2e-4). "
        "Default 2e-4."))
    cov_clip_bounds: list[float] = field(default_factory=lambda: [1.0, 5.0], metadata=_help(
        "Clip-Cov: (low, high) covariance bounds of the eligible tokens (verl's defaults). Default [1.0, 5.0]."))
    cov_kl_coef: float = field(default=1.0, metadata=_help(
        "KL-Cov: coefficient of |log pi - log pi_old| on the selected tokens (verl's ppo_kl_coef). Default 1.0."))


@register
class Covariance(Method):
    """LOSS (training batches): Clip-Cov detaches the selected tokens' log-probs in TRL's loss forward; KL-Cov adds
    its penalty to TRL's loss."""

    name = "cov"
    switch = "cov_method"
    stage = Stage.LOSS
    order = 20
    Config = CovarianceConfig
    # What Clip-Cov draws its tokens with: None, torch's global generator (the LLM trainer); the toy backend gives
    # each policy its seed's generator, so a seed's run does not depend on the other seeds sharing its batch.
    generator: torch.Generator | None = None

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return args.cov_method is not None

    @classmethod
    def card_for(cls, args: Any) -> Card | None:
        return _CARDS[args.cov_method]

    @classmethod
    def cards(cls) -> tuple[Card, ...]:
        return tuple(_CARDS.values())

    @classmethod
    def validate(cls, args: Any) -> None:
        if args.cov_method is None:
            return
        check_choice("cov_method", args.cov_method, COVARIANCE_METHODS)
        check(0 < args.cov_ratio <= 1, "cov_ratio", f"must be in (0, 1], got {args.cov_ratio}")
        check(len(args.cov_clip_bounds) == 2 and args.cov_clip_bounds[0] < args.cov_clip_bounds[1],
              "cov_clip_bounds", f"must be [low, high] with low < high, got {args.cov_clip_bounds}")
        check(args.cov_kl_coef >= 0, "cov_kl_coef", f"must be >= 0, got {args.cov_kl_coef}")
        reused = (args.gradient_accumulation_steps % (args.steps_per_generation * args.num_iterations) != 0
                  or (args.use_vllm and args.vllm_importance_sampling_correction))
        check(args.cov_method != "kl_cov" or reused, "cov_method",
              "'kl_cov' penalises |log pi - log pi_old|, which is 0 with zero gradient on a batch used once: "
              "set num_iterations > 1 (or steps_per_generation > gradient_accumulation_steps)")

    def select(self, per_token_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
               clipped: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """The (batch, tokens) bool mask of the tokens acted on, by covariance of log-prob and advantage over the
        masked tokens: Clip-Cov draws a random cov_ratio share inside cov_clip_bounds, skipping `clipped` tokens
        (PPO's clip stops them already); KL-Cov takes the top cov_ratio share. The toy backend calls it per policy."""
        covariance = token_covariance(per_token_logps, advantages, mask)
        if self.args.cov_method == "kl_cov":
            return kl_cov_selection(covariance, self.args.cov_ratio)
        low, high = self.args.cov_clip_bounds
        excluded = None if clipped is None else clipped & (mask > 0)
        return clip_cov_selection(covariance, self.args.cov_ratio, low, high, excluded=excluded, generator=generator)

    def edit_loss_logps(self, context: LossContext, inputs: dict[str, Any], per_token_logps: torch.Tensor
                        ) -> torch.Tensor:
        """Clip-Cov: the log-probs with the selected tokens detached (no policy gradient through them)."""
        if self.args.cov_method != "clip_cov":
            return per_token_logps
        mask = inputs["completion_mask"].bool()
        advantages = inputs["advantages"]
        old = inputs.get("old_per_token_logps")
        log_ratio = per_token_logps.detach() - (per_token_logps.detach() if old is None else old)
        clipped = ppo_clipped(advantages, log_ratio, context.epsilon_low, context.epsilon_high)
        selected = self.select(per_token_logps, advantages, mask, clipped, self.generator)
        _log_selection(context, selected, mask)
        return torch.where(selected, per_token_logps.detach(), per_token_logps)

    def loss_term(self, step: LossStep) -> torch.Tensor | None:
        """KL-Cov: cov_kl_coef x |log pi - log pi_old| on the selected tokens, as a masked token mean scaled for
        gradient accumulation (on a reused batch only: pi_old exists)."""
        inputs = step.inputs
        if self.args.cov_method != "kl_cov" or step.mode != "train" or inputs.get("old_per_token_logps") is None:
            return None
        selected = self.select(step.per_token_logps, inputs["advantages"], step.mask)
        _log_selection(step.context, selected, step.mask.bool())
        penalty = (step.per_token_logps - inputs["old_per_token_logps"]).abs() * selected * step.mask
        return self.args.cov_kl_coef * penalty.sum() / step.mask.sum().clamp(min=1.0) / step.accumulation


def _log_selection(context: LossContext, selected: torch.Tensor, mask: torch.Tensor) -> None:
    """Log `cov/selected_fraction`: the share of completion tokens Clip-Cov / KL-Cov acted on (global)."""
    context.log_means("train", {"cov/selected_fraction": selected.sum()}, mask.sum())
