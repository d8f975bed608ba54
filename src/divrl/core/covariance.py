"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models"): entropy collapses through the few tokens whose log-prob and advantage covary most, so act on those.

Per token, Cov = (A - mean A) (log pi - mean log pi), means over the batch's completion tokens. Clip-Cov stops the
policy gradient of a random `ratio` share of the tokens whose Cov lies in (low, high), skipping tokens PPO's
clip already stops; KL-Cov adds kl_coef |log pi - log pi_old| on the top `ratio` share of tokens by Cov.
Defaults follow verl's `clip_cov` / `kl_cov` policy losses (ratio 2e-4, bounds (1, 5), KL coefficient 1).
"""

from __future__ import annotations

import torch

from divrl.core._args import checked


@checked
def token_covariance(logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(A - mean A)(log pi - mean log pi) per token (B, T), means over the masked tokens; -inf outside the mask.
    `advantages` is (B,) (one per sequence, broadcast over its tokens) or (B, T)."""
    if logps.dim() != 2 or mask.shape != logps.shape:
        raise ValueError(f"logps and mask must be (batch, tokens) of one shape, got {tuple(logps.shape)} and "
                         f"{tuple(mask.shape)}")
    if advantages.shape not in (logps.shape[:1], logps.shape):
        raise ValueError(f"advantages must be (B,) or (B, T) for logps of shape {tuple(logps.shape)}, got "
                         f"{tuple(advantages.shape)}")
    valid = mask.bool()
    adv = (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages).expand_as(logps).detach().float()
    logps = logps.detach().float()
    count = valid.sum().clamp(min=1)
    adv_mean = (adv * valid).sum() / count
    logp_mean = (logps * valid).sum() / count
    covariance = (adv - adv_mean) * (logps - logp_mean)
    return covariance.masked_fill(~valid, -torch.inf)


@checked
def ppo_clipped(advantages: torch.Tensor, log_ratio: torch.Tensor, clip_low: float, clip_high: float) -> torch.Tensor:
    """Boolean (B, T): tokens where PPO's clipped surrogate -A clip(r, 1 - low, 1 + high) exceeds -A r, i.e. the
    clip is active and their policy gradient is already 0 (Clip-Cov leaves them out). `advantages` is (B,) or
    (B, T); r = exp(log_ratio)."""
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    if log_ratio.dim() != 2 or adv.dim() != 2 or adv.shape[0] != log_ratio.shape[0] or adv.shape[1] not in (
            1, log_ratio.shape[1]):
        raise ValueError(f"advantages must be (B,) or (B, T) and log_ratio (B, T), got shapes "
                         f"{tuple(advantages.shape)} and {tuple(log_ratio.shape)}")
    ratio = log_ratio.detach().exp()
    return -adv * ratio.clamp(1 - clip_low, 1 + clip_high) > -adv * ratio


@checked
def clip_cov_selection(covariance: torch.Tensor, ratio: float, low: float, high: float,
                       excluded: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Boolean (B, T): max(1, int(ratio x valid tokens)) tokens drawn uniformly among those with low < Cov < high
    and not `excluded` (the tokens PPO's clip already stops); fewer if fewer qualify."""
    valid = torch.isfinite(covariance)
    eligible = valid & (covariance > low) & (covariance < high)
    if excluded is not None:
        eligible &= ~excluded
    selected = torch.zeros_like(eligible)
    candidates = torch.nonzero(eligible)
    if len(candidates):
        budget = max(int(ratio * int(valid.sum())), 1)
        order = torch.randperm(len(candidates), generator=generator)[:budget]
        chosen = candidates[order.to(candidates.device)]
        selected[chosen[:, 0], chosen[:, 1]] = True
    return selected


@checked
def kl_cov_selection(covariance: torch.Tensor, ratio: float) -> torch.Tensor:
    """Boolean (B, T): the max(1, int(ratio x valid tokens)) valid tokens of largest Cov."""
    valid = torch.isfinite(covariance)
    selected = torch.zeros_like(valid)
    count = int(valid.sum())
    if count:
        top = covariance.flatten().topk(max(int(ratio * count), 1)).indices
        selected.view(-1)[top] = True
    return selected & valid
