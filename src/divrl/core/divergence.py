"""Per-token f-divergence estimators between the policy pi and the reference mu (DPH-RL, seed 004).

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
Values are differentiable w.r.t. `logp_policy`; used as a per-token loss term, as TRL does with k3.
"""

from __future__ import annotations

import math
from typing import Literal

import torch

DIVERGENCES = ("reverse_kl", "forward_kl", "js", "alpha")
SampleSource = Literal["policy", "reference"]

# Log-ratios are clamped to +-LOG_RATIO_CLAMP before exponentiation, so a token the reference finds
# very unlikely cannot produce inf/NaN losses.
LOG_RATIO_CLAMP = 20.0
# alpha this close to 0 or 1 uses the closed-form limit (reverse / forward KL) to avoid 0/0.
ALPHA_LIMIT_TOL = 1e-4


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
    raise ValueError(f"unknown divergence {kind!r}; choose one of {', '.join(DIVERGENCES)}")


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


def exact_divergence(p_policy: torch.Tensor, p_ref: torch.Tensor, kind: str, alpha: float = 0.5) -> torch.Tensor:
    """Exact D(mu || pi) = sum_y pi(y) f(mu(y) / pi(y)) for categorical distributions (tests, toy envs)."""
    log_rho = (p_ref.log() - p_policy.log()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return (p_policy * generator(kind, log_rho, alpha)).sum(dim=-1)
