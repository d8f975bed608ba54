"""Batched toy policies: P independent policies (seeds x population members) stored as stacked tensors.

Every parameter has a leading member dimension, so one forward/backward pass trains all members and
Adam (element-wise) keeps them independent. A "token" is one decision: a step of a tabular episode,
or one coordinate of an idea vector (a factorised Gaussian), mirroring per-token LLM losses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from divrl.toy.envs import INVALID_LOGIT, IdeaEnv, TabularEnv

Params = dict[str, torch.Tensor]

# Log-std clamp of the Gaussian head, as in SAC's reference implementation: without it an entropy or
# novelty bonus grows the std without bound (measured: MaxEnt complexity ~1e9 after 120 epochs).
LOG_STD_BOUNDS = (-20.0, 2.0)


@dataclass
class Rollout:
    """Samples of all P members: per-token actions, states and validity mask (P, N, T), plus outcomes."""

    actions: torch.Tensor  # tabular: (P, N, T) long; ideas: (P, N, dim) float idea vectors
    states: torch.Tensor  # tabular: (P, N, T) long states; ideas: (N,) prompt ids shared by all members
    mask: torch.Tensor  # (P, N, T) bool: real tokens
    outcomes: torch.Tensor  # tabular: (P, N) long outcome ids; ideas: the idea vectors (P, N, dim)

    @property
    def lengths(self) -> torch.Tensor:
        """Tokens per sample (P, N)."""
        return self.mask.sum(-1)


class TabularPolicy:
    """Per-state softmax over valid actions (the bandit is the one-state case)."""

    def __init__(self, env: TabularEnv, num_members: int) -> None:
        self.env = env
        logits = env.initial_logits.expand(num_members, -1, -1).clone()
        self.params: Params = {"logits": torch.nn.Parameter(logits)}

    def log_probs(self, params: Params) -> torch.Tensor:
        """Per-state action log-probabilities (P, S, A); invalid actions get log-prob ~ -1e9."""
        return torch.log_softmax(params["logits"].masked_fill(~self.env.valid, INVALID_LOGIT), dim=-1)

    def outcome_distribution(self, params: Params) -> torch.Tensor:
        """Exact outcome distribution (P, O) by dynamic programming over the state DAG."""
        return self.env.exact_distribution(self.log_probs(params).exp().detach())

    def draw_noise(self, num_members: int, num_samples: int, generator: torch.Generator) -> torch.Tensor:
        """Uniforms (members, N, T) that `sample` turns into episodes (inverse-CDF per step)."""
        return torch.rand(num_members, num_samples, self.env.max_length, generator=generator)

    @torch.no_grad()
    def sample(self, params: Params, noise: torch.Tensor) -> Rollout:
        """Roll out N episodes per member, all members and steps vectorised."""
        env = self.env
        probs = self.log_probs(params).exp()
        members, n, horizon = noise.shape
        member = torch.arange(members)[:, None].expand(members, n)
        state = torch.zeros(members, n, dtype=torch.long)
        alive = torch.ones(members, n, dtype=torch.bool)
        outcomes = torch.full((members, n), -1, dtype=torch.long)
        states = torch.zeros(members, n, horizon, dtype=torch.long)
        actions = torch.zeros(members, n, horizon, dtype=torch.long)
        mask = torch.zeros(members, n, horizon, dtype=torch.bool)
        for t in range(horizon):
            cdf = probs[member, state].cumsum(-1)  # (P, N, A)
            action = (cdf < noise[:, :, t, None] * cdf[..., -1:]).sum(-1)
            states[:, :, t] = torch.where(alive, state, 0)
            actions[:, :, t] = torch.where(alive, action, 0)
            mask[:, :, t] = alive
            outcome = env.outcome_of[state, action]
            stops = alive & (outcome >= 0)
            outcomes[stops] = outcome[stops]
            alive = alive & ~stops
            state = torch.where(alive, env.next_state[state, action], 0)
        return Rollout(actions=actions, states=states, mask=mask, outcomes=outcomes)

    def evaluate(self, params: Params, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-prob of each taken action and entropy of each visited state's action distribution (P, N, T);
        0 on padding."""
        logp = self.log_probs(params)
        member = torch.arange(logp.shape[0])[:, None, None]
        token_logp = logp[member, rollout.states, rollout.actions] * rollout.mask
        entropy = -(logp.exp() * logp).sum(-1)  # (P, S)
        token_entropy = torch.gather(entropy, 1, rollout.states.flatten(1)).view_as(rollout.states) * rollout.mask
        return token_logp, token_entropy


class IdeaPolicy:
    """The execution-rewards paper's idea policy: prompt embedding -> 2 x hidden ReLU trunk -> Gaussian mean and
    log-std."""

    def __init__(
        self,
        env: IdeaEnv,
        num_members: int,
        init_generators: list[torch.Generator],
        embed_dim: int = 64,
        hidden: int = 128,
    ) -> None:
        if len(init_generators) != num_members:
            raise ValueError(f"need one init generator per member, got {len(init_generators)} for {num_members}")
        self.env = env
        shapes = {
            "embed": (env.num_prompts, embed_dim),
            "w1": (embed_dim, hidden), "b1": (1, hidden),
            "w2": (hidden, hidden), "b2": (1, hidden),
            "w3": (hidden, 2 * env.dim), "b3": (1, 2 * env.dim),
        }
        fan_in = {"w1": embed_dim, "b1": embed_dim, "w2": hidden, "b2": hidden, "w3": hidden, "b3": hidden}
        members: dict[str, list[torch.Tensor]] = {name: [] for name in shapes}
        for generator in init_generators:
            for name, shape in shapes.items():
                if name == "embed":  # nn.Embedding's default init
                    members[name].append(torch.randn(shape, generator=generator))
                else:  # nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
                    bound = 1.0 / math.sqrt(fan_in[name])
                    members[name].append((torch.rand(shape, generator=generator) * 2 - 1) * bound)
        self.params: Params = {name: torch.nn.Parameter(torch.stack(values)) for name, values in members.items()}

    def prompts(self, num_samples: int) -> torch.Tensor:
        """Prompt id of each sample: prompts in contiguous blocks (N = prompts x G gives the GRPO groups)."""
        return torch.arange(num_samples) * self.env.num_prompts // num_samples

    def gaussian(self, params: Params, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-std (P, N, dim) of each member for each prompt id."""
        h = params["embed"][:, prompts]
        h = torch.relu(h @ params["w1"] + params["b1"])
        h = torch.relu(h @ params["w2"] + params["b2"])
        mean, log_std = (h @ params["w3"] + params["b3"]).chunk(2, dim=-1)
        return mean, log_std.clamp(*LOG_STD_BOUNDS)

    def draw_noise(self, num_members: int, num_samples: int, generator: torch.Generator) -> torch.Tensor:
        """Standard normals (members, N, dim) that `sample` shifts and scales into ideas."""
        return torch.randn(num_members, num_samples, self.env.dim, generator=generator)

    @torch.no_grad()
    def sample(self, params: Params, noise: torch.Tensor) -> Rollout:
        """One idea per row of `noise` (members, N, dim), prompts laid out by `prompts(N)`."""
        prompts = self.prompts(noise.shape[1])
        mean, log_std = self.gaussian(params, prompts)
        ideas = mean + log_std.exp() * noise
        mask = torch.ones(ideas.shape, dtype=torch.bool)
        return Rollout(actions=ideas, states=prompts, mask=mask, outcomes=ideas)

    def evaluate(self, params: Params, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
        """Gaussian log-density and differential entropy of each coordinate of each idea (P, N, dim)."""
        mean, log_std = self.gaussian(params, rollout.states)
        z = (rollout.actions - mean) * torch.exp(-log_std)
        logp = -0.5 * z**2 - log_std - 0.5 * math.log(2 * math.pi)
        return logp, log_std + 0.5 * math.log(2 * math.pi * math.e)


Policy = TabularPolicy | IdeaPolicy
