"""REINVENT's augmented likelihood (Olivecrona et al. 2017; REINVENT 4's `dap_strategy`): the OBJECTIVE stage that
molecule designers compare against (PMO's strongest RL baseline, the IPS paper's baseline).

`divrl.core.reinvent.augmented_likelihood_residual` replaces GRPO's clipped surrogate: per completion x,
(log pi_prior(x) + sigma S(x) - log pi_theta(x))^2, averaged over the micro-batch's completions (REINVENT takes the
batch mean) and divided by the gradient-accumulation steps, as TRL's losses are.
- log pi_theta(x): the completion's summed per-token log-probs from TRL's own loss forward (EOS included, as
  REINVENT's likelihood of a SMILES includes its end token).
- log pi_prior(x): the frozen starting model, TRL's reference: `ref_per_token_logps` (adapter disabled under PEFT,
  otherwise a frozen copy of the initial policy), summed the same way.
- S(x): the completion's reward as TRL sums it for the advantages, after the REWARD methods' shaping: the task's
  score (through the scaffold filter when the task has one, so S is the filtered score) plus any bonus column.
  With IPS on, S is the IPS-scaled score divided by the group size G: each molecule's score is divided by how many
  times it occurs in its group (1 / (G p_hat)), so a group of distinct molecules keeps REINVENT's scale (sigma stays
  calibrated, where the bare factor 1 / p_hat would multiply sigma S by up to G) and repeats share one molecule's
  score. The IPS paper itself swapped REINVENT's loss for IPS-GRPO's (its arm is `ips` alone, with the filter and
  replay); `reinvent` + `ips` is divrl's composition of the two.
- TRL's loss still runs, on zeroed advantages (its surrogate is exactly 0), so its beta KL term, entropy bonus and
  logging stay as configured; with REINVENT, beta is usually 0 (the regression to the prior is the regulariser).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from divrl.core.reinvent import REINVENT_SIGMA, augmented_likelihood_residual
from divrl.methods import papers
from divrl.methods._fields import Unset, _help, check
from divrl.methods.base import Card, LossStep, Method, Stage, group_scaled, register


@dataclass
class ReinventConfig:
    """The REINVENT fields of `DivRLConfig`."""

    reinvent: bool = field(default=Unset(False), metadata=_help(
        "REINVENT's augmented-likelihood objective (Olivecrona et al. 2017) replaces GRPO's surrogate: "
        "(log pi_prior + sigma S - log pi)^2 per completion, pi_prior the reference model. Default False."))
    reinvent_sigma: float = field(default=REINVENT_SIGMA, metadata=_help(
        "Score multiplier sigma (Saturn and the IPS paper: 128; REINVENT 4's RLReward default: 120). Default "
        "128.0."))


@register
class Reinvent(Method):
    """OBJECTIVE: REINVENT's augmented-likelihood regression replaces GRPO's surrogate."""

    name = "reinvent"
    switch = "reinvent"
    stage = Stage.OBJECTIVE
    Config = ReinventConfig
    card = Card("REINVENT", "reinvent", papers.REINVENT)
    preset = {"reinvent": True}
    shared = True
    reads_rewards = True

    @classmethod
    def enabled(cls, args: Any) -> bool:
        return bool(args.reinvent)

    @classmethod
    def validate(cls, args: Any) -> None:
        check(args.reinvent_sigma > 0, "reinvent_sigma", f"must be > 0, got {args.reinvent_sigma}")
        if args.reinvent and args.flowrl:
            check(False, "reinvent", "cannot be combined with flowrl: each replaces GRPO's surrogate")

    @classmethod
    def needs_reference_logps(cls, args: Any) -> bool:
        return True

    def state_dict(self) -> Any:
        """Nothing learned beyond the policy: an empty state (the checkpoint's objective part)."""
        return {}

    def surrogate_inputs(self, inputs: dict[str, Any], training: bool) -> dict[str, Any]:
        """TRL's loss runs on zeroed advantages: its surrogate is exactly 0."""
        return {**inputs, "advantages": torch.zeros_like(inputs["advantages"])}

    def objective_term(self, step: LossStep) -> torch.Tensor:
        """The mean squared residual over the micro-batch's completions, divided by the gradient-accumulation steps
        (completions TRL masks out entirely take no part)."""
        inputs, per_token_logps = step.inputs, step.per_token_logps
        mask = step.mask.to(per_token_logps.dtype)
        scores = inputs["divrl_rewards"].to(per_token_logps.dtype)
        if group_scaled(self.args):  # IPS: each score divided by its molecule's count in the group
            scores = scores / self.args.num_generations
        residual = augmented_likelihood_residual((per_token_logps * mask).sum(1),
                                                 (inputs["ref_per_token_logps"] * mask).sum(1), scores,
                                                 self.args.reinvent_sigma)
        valid = (mask.sum(1) > 0).to(per_token_logps.dtype)
        per_sequence = residual.pow(2) * valid
        step.context.log_means(step.mode, {"reinvent/loss": per_sequence.sum(),
                                           "reinvent/residual": (residual.abs() * valid).sum(),
                                           "reinvent/score": (scores * valid).sum()}, valid.sum())
        return per_sequence.sum() / valid.sum().clamp(min=1.0) / step.accumulation
