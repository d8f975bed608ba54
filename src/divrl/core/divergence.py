"""Per-token f-divergence estimators between the policy pi and the reference mu (DPH-RL, the DPH-RL paper).

Every divergence is written in generator form D(mu || pi) = E_pi[f(rho)], rho = mu(y) / pi(y), with f
convex, f(1) = 0 and f'(1) = 0 (a linear term c (rho - 1) is added where needed: it has zero mean under
pi and makes each per-token value >= 0, which lowers variance; for reverse KL this is TRL's k3).
  reverse_kl  KL(pi || mu)   f(x) = x - 1 - log x                 (mode-seeking)
  forward_kl  KL(mu || pi)   f(x) = x log x - x + 1               (mass-covering)
  js          JS(mu, pi)     f(x) = (x log(2x / (1 + x)) + log(2 / (1 + x))) / 2
  alpha       Amari alpha    f(x) = (x^a - 1 - a (x - 1)) / (a (a - 1)); a -> 1 forward KL, a -> 0 reverse KL
Estimators use only the log-probs of the sampled tokens:
  samples from the policy:    value = f(rho)
  samples from the reference: value = f(rho) / rho   (E_pi[f(rho)] = E_mu[f(rho) / rho]: no policy sampling)
`per_token_divergence` gives these values; their pathwise gradient is exact for reference samples (which
do not depend on the policy) but NOT for policy samples, where it drops the score-function term: used as a
loss, k3 (TRL's `beta` term) has the expected gradient of the FORWARD KL, not of the reverse KL. Training on
policy samples therefore uses `policy_sample_divergence_loss`, whose value is the same estimate and whose
gradient is unbiased for every divergence:
  d/dtheta E_pi[f(rho)] = E_pi[(f(rho) - rho f'(rho)) d log pi],
per token, with the prefix taken as given (the per-token approximation TRL's KL term also makes).
"""

from __future__ import annotations

import math
from typing import Literal

import torch

from divrl.core._args import checked

DIVERGENCES = ("reverse_kl", "forward_kl", "js", "alpha")
SampleSource = Literal["policy", "reference"]

# Log-ratios are clamped to +-LOG_RATIO_CLAMP before exponentiation, so a token the reference finds
# very unlikely cannot produce inf/NaN losses.
LOG_RATIO_CLAMP = 20.0
# alpha this close to 0 or 1 uses the closed-form limit (reverse / forward KL) to avoid 0/0.
ALPHA_LIMIT_TOL = 1e-4


@checked
def generator(kind: str, log_rho: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """f(rho) of the named divergence, computed from log rho for numerical stability."""
    rho = log_rho.exp()
    if kind == "alpha":
        if abs(alpha) < ALPHA_LIMIT_TOL:
            kind = "reverse_kl"
        elif abs(alpha - 1.0) < ALPHA_LIMIT_TOL:
            kind = "forward_kl"
        else:
            return ((alpha * log_rho).exp() - 1.0 - alpha * (rho - 1.0)) / (alpha * (alpha - 1.0))
    if kind == "reverse_kl":
        return rho - 1.0 - log_rho
    if kind == "forward_kl":
        return rho * log_rho - rho + 1.0
    if kind == "js":
        log_half_sum = torch.logaddexp(log_rho, torch.zeros_like(log_rho)) - math.log(2.0)
        return 0.5 * (rho * (log_rho - log_half_sum) - log_half_sum)
    raise ValueError(f"kind must name a divergence, one of {', '.join(DIVERGENCES)}; got {kind!r}")


@checked
def per_token_divergence(
    logp_policy: torch.Tensor,
    logp_ref: torch.Tensor,
    kind: str,
    samples_from: SampleSource = "policy",
    alpha: float = 0.5,
) -> torch.Tensor:
    """Per-token estimate of the named divergence from the sampled tokens' log-probs (see module doc)."""
    if logp_policy.shape != logp_ref.shape:
        raise ValueError(f"logp_policy shape {tuple(logp_policy.shape)} != logp_ref shape {tuple(logp_ref.shape)}")
    if samples_from not in ("policy", "reference"):
        raise ValueError(f"samples_from must be 'policy' or 'reference', got {samples_from!r}")
    log_rho = (logp_ref - logp_policy).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    value = generator(kind, log_rho, alpha)
    return value if samples_from == "policy" else value * (-log_rho).exp()


@checked
def policy_sample_divergence_loss(
    logp_policy: torch.Tensor,
    logp_ref: torch.Tensor,
    kind: str,
    alpha: float = 0.5,
    sample_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token loss whose value is f(rho) and whose expected gradient is that of D(mu || pi) (module doc).

    f(rho) + sg(f(rho)) (log pi - sg(log pi)) adds the score-function term the pathwise gradient misses.
    `sample_weight` (detached, broadcastable) corrects for samples drawn from another policy, e.g.
    pi / pi_old when a batch is reused for several optimizer steps.
    """
    value = per_token_divergence(logp_policy, logp_ref, kind, "policy", alpha)
    loss = value + value.detach() * (logp_policy - logp_policy.detach())
    if sample_weight is None:
        return loss
    try:
        return loss * sample_weight.detach()
    except RuntimeError:
        raise ValueError(f"sample_weight of shape {tuple(sample_weight.shape)} does not broadcast against the "
                         f"per-token losses of shape {tuple(loss.shape)}") from None


@checked
def truncated_importance_weights(log_ratio: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    """exp(log_ratio) truncated to [low, high] (`low` None: from above only), detached.

    Behaviour correction for samples drawn by an older policy (log_ratio = log pi - log pi_old), truncated the
    way TRL bounds its own importance weights when a batch is reused (num_iterations > 1): to the trust region
    [1 - epsilon, 1 + epsilon_high] of its clipped surrogate, or at epsilon_high for CISPO. A weight in
    [low, high] bounds the reweighted estimate's second moment: E[(w X)^2] <= high^2 E[X^2], where the raw
    ratio's is unbounded (up to e^40 E[X^2] with log-ratios clamped at +-LOG_RATIO_CLAMP only).
    """
    if not (math.isfinite(high) and high > 0) or (low is not None and not 0 <= low <= high):
        raise ValueError(f"importance weight bounds must satisfy 0 <= low <= high < inf, got low={low}, high={high}")
    weight = log_ratio.detach().clamp(max=math.log(high)).exp()
    return weight if low is None else weight.clamp(min=low)


@checked
def exact_divergence(p_policy: torch.Tensor, p_ref: torch.Tensor, kind: str, alpha: float = 0.5) -> torch.Tensor:
    """Exact D(mu || pi) = sum_y pi(y) f(mu(y) / pi(y)) for categorical distributions (tests, toy envs).

    The generator form needs pi(y) > 0 wherever mu(y) > 0 (else rho is infinite): such inputs are refused.
    """
    if p_policy.shape != p_ref.shape:
        raise ValueError(f"p_policy shape {tuple(p_policy.shape)} != p_ref shape {tuple(p_ref.shape)}")
    if bool(((p_policy <= 0) & (p_ref > 0)).any()):
        raise ValueError("exact_divergence needs p_policy > 0 wherever p_ref > 0 (mu / pi is infinite there)")
    support = p_policy > 0  # outcomes the policy never takes contribute nothing
    log_rho = torch.where(support, p_ref.log() - p_policy.log(), 0.0).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.where(support, p_policy * generator(kind, log_rho, alpha), 0.0).sum(dim=-1)
