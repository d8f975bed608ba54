"""FlowRL's trajectory-balance objective (Zhu et al. 2025, "FlowRL: Matching Reward Distributions for LLM Reasoning").

Per sequence y of prompt x:
    w * ( log Z(x) + (1/|y|) log pi(y|x) - beta_r * r_hat(x, y) - (1/|y|) log pi_ref(y|x) )^2
with r_hat the group-normalised reward, log Z(x) a learned partition estimate, and w the detached
sequence-level importance ratio pi(y|x) / pi_old(y|x) clipped to [1 - clip, 1 + clip]. A zero residual
means log pi(y|x) = log pi_ref(y|x) + |y| (beta_r r_hat - log Z(x)); when every sequence has the same
length this is pi proportional to pi_ref exp(beta_r r_hat |y|): reward-distribution matching rather than
reward maximisation (with mixed lengths, log Z is scaled by |y| too, which favours long sequences).
Because r_hat is normalised by the current reward spread, a spread-out optimum exists only for small
beta_r (see benchmarks/results/toy_flowrl.md).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from divrl.core._args import checked

# FlowRL's published defaults: reward scale beta = 15 and PPO-style clipping 0.2 of the importance weight.
FLOWRL_BETA = 15.0
FLOWRL_IMPORTANCE_CLIP = 0.2


class TrajectoryBalanceTerms(NamedTuple):
    """The two factors of the per-sequence FlowRL loss w * residual^2 (B,) each; trainers log them."""

    residual: torch.Tensor
    weight: torch.Tensor


@checked
def trajectory_balance_terms(
    log_z: torch.Tensor,
    seq_logp_policy: torch.Tensor,
    seq_logp_ref: torch.Tensor,
    lengths: torch.Tensor,
    normalised_rewards: torch.Tensor,
    beta_r: float = FLOWRL_BETA,
    seq_logp_old: torch.Tensor | None = None,
    importance_clip: float = FLOWRL_IMPORTANCE_CLIP,
) -> TrajectoryBalanceTerms:
    """Residual and detached importance weight of `trajectory_balance_loss` (same arguments)."""
    named = {"log_z": log_z, "seq_logp_policy": seq_logp_policy, "seq_logp_ref": seq_logp_ref, "lengths": lengths,
             "normalised_rewards": normalised_rewards}
    if len({t.shape for t in named.values()}) != 1 or log_z.dim() != 1:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in named.items())
        raise ValueError(f"trajectory_balance_loss needs (B,) tensors of equal shape, got {shapes}")
    if importance_clip < 0:
        raise ValueError(f"importance_clip must be >= 0, got {importance_clip}")
    length = lengths.clamp(min=1).to(seq_logp_policy.dtype)
    residual = (
        log_z
        + seq_logp_policy / length
        - beta_r * normalised_rewards.detach()
        - seq_logp_ref.detach() / length
    )
    if seq_logp_old is None:
        weight = torch.ones_like(residual)
    else:
        log_ratio = (seq_logp_policy - seq_logp_old).detach().clamp(max=20.0)
        weight = log_ratio.exp().clamp(1.0 - importance_clip, 1.0 + importance_clip)
    return TrajectoryBalanceTerms(residual, weight)


@checked
def trajectory_balance_loss(
    log_z: torch.Tensor,
    seq_logp_policy: torch.Tensor,
    seq_logp_ref: torch.Tensor,
    lengths: torch.Tensor,
    normalised_rewards: torch.Tensor,
    beta_r: float = FLOWRL_BETA,
    seq_logp_old: torch.Tensor | None = None,
    importance_clip: float = FLOWRL_IMPORTANCE_CLIP,
) -> torch.Tensor:
    """Per-sequence FlowRL loss; all inputs are (B,) tensors of summed log-probs, lengths and rewards.

    `seq_logp_old` (the sampling policy's summed log-probs) gives the importance weight; None means
    on-policy (w = 1). Gradients flow into `log_z` and `seq_logp_policy` only.
    """
    residual, weight = trajectory_balance_terms(log_z, seq_logp_policy, seq_logp_ref, lengths, normalised_rewards,
                                                beta_r, seq_logp_old, importance_clip)
    return weight * residual**2
