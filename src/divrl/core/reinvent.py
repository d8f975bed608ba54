"""REINVENT's augmented-likelihood objective (Olivecrona et al. 2017; Blaschke et al. 2020, REINVENT 2.0; REINVENT 4's
`dap_strategy` in reinvent/runmodes/RL/reward.py).

Per sampled sequence x with score S(x) in [0, 1]:
    ( log pi_prior(x) + sigma * S(x) - log pi_agent(x) )^2
with sequence log-likelihoods (sums over tokens). Its minimiser is pi_agent(x) proportional to
pi_prior(x) exp(sigma S(x)): the prior tilted toward high scores, held close to it by the regression rather than by
a KL penalty. sigma = 128 is Saturn's and the IPS paper's setting (REINVENT 4's RLReward defaults to 120).
"""

from __future__ import annotations

import torch

from divrl.core._args import checked

REINVENT_SIGMA = 128.0


@checked
def augmented_likelihood_residual(
    agent_logps: torch.Tensor, prior_logps: torch.Tensor, scores: torch.Tensor, sigma: float = REINVENT_SIGMA
) -> torch.Tensor:
    """(B,) residuals log pi_prior(x) + sigma S(x) - log pi_agent(x) of sequence log-likelihoods; the loss is their
    square. Only `agent_logps` carries a gradient."""
    if not (agent_logps.shape == prior_logps.shape == scores.shape) or agent_logps.dim() != 1:
        raise ValueError(f"augmented_likelihood_residual needs (B,) tensors of equal shape, got agent_logps "
                         f"{tuple(agent_logps.shape)}, prior_logps {tuple(prior_logps.shape)}, scores "
                         f"{tuple(scores.shape)}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    return prior_logps.detach() + sigma * scores.detach().to(agent_logps.dtype) - agent_logps


@checked
def augmented_likelihood_loss(
    agent_logps: torch.Tensor, prior_logps: torch.Tensor, scores: torch.Tensor, sigma: float = REINVENT_SIGMA
) -> torch.Tensor:
    """REINVENT's loss: the mean over the batch of the squared `augmented_likelihood_residual`."""
    return augmented_likelihood_residual(agent_logps, prior_logps, scores, sigma).pow(2).mean()
