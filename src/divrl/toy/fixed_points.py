"""Where FlowRL's trajectory-balance loss can send a tabular toy policy: its fixed points in the large-group limit.

A zero residual for every trajectory y, log Z + log pi(y) / L - beta r_hat(y) - log pi_ref(y) / L = 0, means
pi(y) = pi_ref(y) exp(L(y) (beta r_hat(y) - log Z)). With group normalisation r_hat = (r - mu_pi) / sigma_pi
(the limit of `core.group_advantages` for G -> infinity, population std, no epsilon), and episodes whose length
L(o) is fixed by their outcome o (true of the bandit, the multiplicity grid and the hyper-grid), the candidates form
a one-parameter family over outcomes:

    pi_t(o) = pi_ref(o) exp(L(o) (t r(o) - c_t)),   t = beta / sigma_pi,   c_t normalises,

and pi_t is a fixed point exactly when g(t) = t sigma(pi_t) equals beta. g(0) = 0 and g(t) -> 0 as t -> infinity
(pi_t concentrates on the best outcomes, sigma -> 0), so g has a maximum beta_max: for beta > beta_max there is no
interior fixed point and FlowRL concentrates on the highest-reward outcomes, spread over them as pi_ref(o) exp(-L(o) c)
(the t -> infinity end of the family), wherever on-policy sampling still reaches them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from divrl.toy.envs import INVALID_LOGIT, TabularEnv

# The scan of g(t): t on a log grid wide enough for every toy's reward scale (g has decayed long before 1e3).
T_GRID = np.geomspace(1e-4, 1e3, 4000)
BISECTION_STEPS = 100


@dataclass(frozen=True)
class FlowRLFixedPoints:
    """Large-group fixed points of FlowRL at one beta on one environment (outcome distributions, float64)."""

    beta: float
    beta_max: float  # largest beta with an interior fixed point: max_t t sigma(pi_t)
    points: list[np.ndarray]  # interior fixed points, by increasing t; the first is the one continuous from pi_ref
    log_z: list[float]  # the learned log Z at each point
    concentration_limit: np.ndarray  # t -> infinity: where FlowRL ends when beta > beta_max


def outcome_lengths(env: TabularEnv) -> np.ndarray:
    """Episode length L(o) of every outcome (O,), 0 where no action ends in o; ValueError if some outcome is
    reached by episodes of several lengths (the outcome-level family below does not exist then)."""
    stops = torch.nonzero(env.outcome_of >= 0)
    lengths: dict[int, set[int]] = {}
    for state, action in stops.tolist():
        lengths.setdefault(int(env.outcome_of[state, action]), set()).add(int(env.level[state]) + 1)
    mixed = [o for o, seen in lengths.items() if len(seen) > 1]
    if mixed:
        raise ValueError(f"{env.name}: FlowRL's outcome-level fixed points need one episode length per outcome; "
                         f"outcomes {mixed[:5]} are reached with several lengths")
    return np.array([next(iter(lengths.get(o, {0}))) for o in range(env.num_outcomes)], dtype=np.float64)


def reference_distribution(env: TabularEnv) -> np.ndarray:
    """Outcome distribution (O,) of the initial policy, FlowRL's reference."""
    probs = torch.softmax(env.initial_logits.double().masked_fill(~env.valid, INVALID_LOGIT), dim=-1)
    return env.exact_distribution(probs[None])[0].numpy()


class _Family:
    """pi_t(o) = pi_ref(o) exp(L(o) (t r(o) - c_t)) over the outcomes pi_ref reaches."""

    def __init__(self, env: TabularEnv) -> None:
        ref = reference_distribution(env)
        self.support = ref > 0
        self.log_ref = np.log(ref[self.support])
        self.lengths = outcome_lengths(env)[self.support]
        self.rewards = env.outcome_rewards.double().numpy()[self.support]
        self.num_outcomes = env.num_outcomes

    def normaliser(self, t: np.ndarray) -> np.ndarray:
        """c_t (T, 1) for t (T,), by bisection in [t r_min, t r_max], where the log-mass changes sign."""
        t = np.asarray(t, dtype=np.float64)[:, None]
        low, high = t * self.rewards.min(), t * self.rewards.max()
        for _ in range(BISECTION_STEPS):
            c = 0.5 * (low + high)
            log_mass = np.logaddexp.reduce(self.log_ref + self.lengths * (t * self.rewards - c), axis=1, keepdims=True)
            low, high = np.where(log_mass > 0, c, low), np.where(log_mass > 0, high, c)
        return 0.5 * (low + high)

    def log_probs(self, t: np.ndarray) -> np.ndarray:
        """log pi_t on the support (T, O') for t (T,)."""
        log_p = self.log_ref + self.lengths * (np.asarray(t, dtype=np.float64)[:, None] * self.rewards
                                               - self.normaliser(t))
        return log_p - np.logaddexp.reduce(log_p, axis=1, keepdims=True)

    def distribution(self, t: float) -> np.ndarray:
        """pi_t on all outcomes (O,)."""
        full = np.zeros(self.num_outcomes)
        full[self.support] = np.exp(self.log_probs(np.array([t]))[0])
        return full

    def log_z(self, t: float) -> float:
        """The log Z that zeroes every residual at pi_t: beta r_hat - log Z = t r - c_t, so log Z = c_t - t mu."""
        mean = np.exp(self.log_probs(np.array([t]))[0]) @ self.rewards
        return float(self.normaliser(np.array([t]))[0, 0] - t * mean)

    def g(self, t: np.ndarray) -> np.ndarray:
        """t sigma(pi_t) (T,): the beta for which pi_t is a fixed point."""
        p = np.exp(self.log_probs(t))
        mean = p @ self.rewards
        variance = (p * (self.rewards - mean[:, None]) ** 2).sum(1)
        return t * np.sqrt(np.maximum(variance, 0.0))


def flowrl_fixed_points(env: TabularEnv, beta: float) -> FlowRLFixedPoints:
    """FlowRL's interior fixed points at `beta` (the roots of t sigma(pi_t) = beta), beta_max and the
    concentration limit."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    family = _Family(env)
    g = family.g(T_GRID)
    points, log_z = [], []
    for i in np.nonzero(np.diff(np.sign(g - beta)) != 0)[0]:
        low, high = T_GRID[i], T_GRID[i + 1]
        rising = g[i + 1] > g[i]
        for _ in range(BISECTION_STEPS):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if (family.g(np.array([mid]))[0] < beta) == rising else (low, mid)
        points.append(family.distribution(0.5 * (low + high)))
        log_z.append(family.log_z(0.5 * (low + high)))
    return FlowRLFixedPoints(beta=beta, beta_max=float(g.max()), points=points, log_z=log_z,
                             concentration_limit=family.distribution(float(T_GRID[-1])))


def closest_interior_fixed_point(env: TabularEnv) -> tuple[float, np.ndarray]:
    """(beta, distribution) of the interior fixed point nearest (L1) to the reward-proportional target over all
    betas in (0, beta_max]: the best FlowRL can do on `env` with any beta (first roots: t up to argmax g)."""
    family = _Family(env)
    g = family.g(T_GRID)
    candidates = T_GRID[: int(np.argmax(g)) + 1]
    target = env.target.double().numpy()
    l1 = np.abs(np.exp(family.log_probs(candidates)) - target[family.support]).sum(1) + target[~family.support].sum()
    best = int(np.argmin(l1))
    return float(g[best]), family.distribution(float(candidates[best]))
