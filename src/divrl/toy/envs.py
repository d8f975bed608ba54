"""Toy environments of the execution-rewards and IPS papers: outcome bandit, multiplicity grid, hyper-grid, simulated
ideas.

The three discrete environments share one representation, `TabularEnv`: a layered DAG of states where
each action either moves to a later state or terminates in an outcome. That makes sampling, exact
outcome distributions (by dynamic programming) and per-state softmax policies one piece of code.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import torch

from divrl.core.archive import GridArchive

# Logit given to invalid actions: exp() underflows to exactly 0 without producing NaN in p * log p.
INVALID_LOGIT = -1e9


@dataclass(frozen=True)
class TabularEnv:
    """A finite layered decision DAG whose episodes end in one of `num_outcomes` terminal outcomes.

    `next_state[s, a]` is the successor (or -1), `outcome_of[s, a]` the outcome an action terminates in
    (or -1); exactly one of them is set for every valid action. States are numbered in topological order
    and `level[s]` is the number of actions taken to reach `s` from the start state 0.
    """

    name: str
    next_state: torch.Tensor  # (S, A) long
    outcome_of: torch.Tensor  # (S, A) long
    valid: torch.Tensor  # (S, A) bool
    level: torch.Tensor  # (S,) long
    outcome_rewards: torch.Tensor  # (O,) float, >= 0
    outcome_labels: list[str]  # (O,) human-readable outcome names
    descriptors: torch.Tensor  # (O, d) float: behaviour descriptor of each outcome (QD cells, novelty)
    archive_dims: list[int]
    archive_ranges: list[tuple[float, float]]
    freq_groups: list[list[int]]  # outcome indices summed into each entry of `outcome_freqs`
    freq_labels: list[str]
    initial_logits: torch.Tensor  # (S, A) float: the policy's starting logits
    reward_noise: float = 0.0  # std of Gaussian noise added to sampled rewards (clipped at 0)
    level_states: list[torch.Tensor] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        levels = [torch.nonzero(self.level == lv).flatten() for lv in range(int(self.level.max()) + 1)]
        object.__setattr__(self, "level_states", levels)

    @property
    def num_states(self) -> int:
        """Number of non-terminal states S (rows of the transition tables)."""
        return int(self.next_state.shape[0])

    @property
    def num_actions(self) -> int:
        """Actions per state A (columns of the transition tables; `valid` masks those a state lacks)."""
        return int(self.next_state.shape[1])

    @property
    def num_outcomes(self) -> int:
        """Number of terminal outcomes O."""
        return int(self.outcome_rewards.numel())

    @property
    def max_length(self) -> int:
        """Most actions any episode can take (the number of state levels)."""
        return len(self.level_states)

    @property
    def target(self) -> torch.Tensor:
        """Reward-proportional outcome distribution p*(o) = r(o) / sum r, the fixed point of IPS."""
        return self.outcome_rewards / self.outcome_rewards.sum()

    def outcome_freqs(self, dist: torch.Tensor) -> torch.Tensor:
        """Aggregate outcome probabilities (..., O) into the reported groups (..., len(freq_groups))."""
        return torch.stack([dist[..., g].sum(-1) for g in self.freq_groups], dim=-1)

    def exact_distribution(self, probs: torch.Tensor) -> torch.Tensor:
        """Exact outcome distribution (P, O) of per-state action probabilities `probs` (P, S, A)."""
        flow = torch.zeros(probs.shape[0], self.num_states, dtype=probs.dtype)
        flow[:, 0] = 1.0
        out = torch.zeros(probs.shape[0], self.num_outcomes, dtype=probs.dtype)
        for states in self.level_states:
            mass = (flow[:, states, None] * probs[:, states, :]).flatten(1)  # (P, n * A)
            nxt = self.next_state[states].flatten()
            outcome = self.outcome_of[states].flatten()
            moves, stops = nxt >= 0, outcome >= 0
            flow.index_add_(1, nxt[moves], mass[:, moves])
            out.index_add_(1, outcome[stops], mass[:, stops])
        return out

    def sample_rewards(self, outcomes: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Rewards of sampled outcomes (any shape), with the optional Gaussian reward noise."""
        rewards = self.outcome_rewards[outcomes]
        if self.reward_noise > 0:
            noise = torch.randn(outcomes.shape, generator=generator) * self.reward_noise
            rewards = (rewards + noise).clamp_min(0.0)
        return rewards


def _parse_rewards(rewards: list[float]) -> torch.Tensor:
    values = torch.tensor(rewards, dtype=torch.float32)
    if values.numel() < 2:
        raise ValueError(f"--rewards needs at least 2 arms, got {rewards}")
    if (values < 0).any() or not torch.isfinite(values).all() or values.sum() <= 0:
        raise ValueError(f"--rewards must be finite, >= 0 and not all 0, got {rewards}")
    return values


def make_bandit(
    rewards: list[float], initial_logits: list[float] | None = None, reward_noise: float = 0.0
) -> TabularEnv:
    """Outcome-selection bandit (the IPS paper, section 3): one state, K arms, arm k pays rewards[k]."""
    r = _parse_rewards(rewards)
    k = r.numel()
    if initial_logits is None:
        logits = torch.zeros(1, k)
    elif len(initial_logits) != k:
        raise ValueError(f"--initial-logits has {len(initial_logits)} values but there are {k} arms")
    else:
        logits = torch.tensor([initial_logits], dtype=torch.float32)
    if reward_noise < 0:
        raise ValueError(f"--reward-noise must be >= 0, got {reward_noise}")
    labels = [f"arm {i + 1}" for i in range(k)]
    return TabularEnv(
        name="bandit",
        next_state=torch.full((1, k), -1, dtype=torch.long),
        outcome_of=torch.arange(k).view(1, k),
        valid=torch.ones(1, k, dtype=torch.bool),
        level=torch.zeros(1, dtype=torch.long),
        outcome_rewards=r,
        outcome_labels=labels,
        descriptors=torch.arange(k, dtype=torch.float32).view(k, 1),
        archive_dims=[k],
        archive_ranges=[(-0.5, k - 0.5)],
        freq_groups=[[i] for i in range(k)],
        freq_labels=labels,
        initial_logits=logits,
        reward_noise=reward_noise,
    )


# Multiplicity grid: monotone right/up walks of 7 steps from (0, 0); outcome = the end point (x, 7 - x).
MULTIPLICITY_STEPS = 7
MULTIPLICITY_A = (3, 4)  # C(7, 3) = 35 paths
MULTIPLICITY_B = (6, 1)  # C(7, 1) = 7 paths


def make_multiplicity_grid() -> TabularEnv:
    """Equal-reward multiplicity grid (the IPS paper, section 6): outcomes A (35 paths) and B (7 paths) pay 1."""
    n = MULTIPLICITY_STEPS
    cells = [(x, d - x) for d in range(n) for x in range(d + 1)]  # states before the last step, by level
    index = {cell: i for i, cell in enumerate(cells)}
    next_state = torch.full((len(cells), 2), -1, dtype=torch.long)
    outcome_of = torch.full((len(cells), 2), -1, dtype=torch.long)
    for i, (x, y) in enumerate(cells):
        for a, (nx, ny) in enumerate(((x + 1, y), (x, y + 1))):
            if nx + ny == n:
                outcome_of[i, a] = nx  # terminal (nx, n - nx) is outcome nx
            else:
                next_state[i, a] = index[(nx, ny)]
    rewards = torch.zeros(n + 1)
    rewards[MULTIPLICITY_A[0]] = rewards[MULTIPLICITY_B[0]] = 1.0
    ends = [(x, n - x) for x in range(n + 1)]
    return TabularEnv(
        name="multiplicity",
        next_state=next_state,
        outcome_of=outcome_of,
        valid=torch.ones(len(cells), 2, dtype=torch.bool),
        level=torch.tensor([x + y for x, y in cells]),
        outcome_rewards=rewards,
        outcome_labels=[f"({x},{y})" for x, y in ends],
        descriptors=torch.tensor(ends, dtype=torch.float32),
        archive_dims=[n + 1, n + 1],
        archive_ranges=[(-0.5, n + 0.5), (-0.5, n + 0.5)],
        freq_groups=[[MULTIPLICITY_A[0]], [MULTIPLICITY_B[0]]],
        freq_labels=["A (35 paths)", "B (7 paths)"],
        initial_logits=torch.zeros(len(cells), 2),
    )


def hypergrid_reward(coords: torch.Tensor, side: int, r0: float, r1: float, r2: float) -> torch.Tensor:
    """GFlowNet hyper-grid reward R0 + R1 prod 1[0.25 < |u - 0.5|] + R2 prod 1[0.3 < |u - 0.5| < 0.4]."""
    dist = (coords.float() / (side - 1) - 0.5).abs()
    ring = (dist > 0.25).all(-1).float()
    core = ((dist > 0.3) & (dist < 0.4)).all(-1).float()
    return r0 + r1 * ring + r2 * core


# Most hyper-grid cells (H^D) supported: every cell is a policy state with its own logits, enumerated up front.
MAX_HYPERGRID_CELLS = 100_000


def make_hypergrid(dim: int = 2, side: int = 8, r0: float = 0.1, r1: float = 0.5, r2: float = 2.0) -> TabularEnv:
    """Hyper-grid (the IPS paper, section 5.1): from the origin, increment one coordinate or stop; 2^dim modes.

    Outcome = the cell where the episode stops. `outcome_freqs` reports the mass in each mode region
    (the cells of one corner whose every coordinate satisfies 0.25 < |x_d / (H - 1) - 0.5|).
    At most MAX_HYPERGRID_CELLS cells: the tabular policy enumerates all H^D of them.
    """
    if dim < 1 or side < 3:
        raise ValueError(f"hyper-grid needs --dim >= 1 and --side >= 3, got --dim {dim}, --side {side}")
    if side**dim > MAX_HYPERGRID_CELLS:
        raise ValueError(f"hyper-grid --side {side} --dim {dim} has {side}^{dim} = {side**dim:.3g} cells; at most "
                         f"{MAX_HYPERGRID_CELLS} are supported (each cell is a state of the tabular policy)")
    if not (math.isfinite(r0 + r1 + r2) and r0 > 0 and r1 >= 0 and r2 >= 0):
        raise ValueError(f"hyper-grid rewards need --r0 > 0 and --r1, --r2 >= 0, got {r0}, {r1}, {r2}")
    coords = torch.tensor(list(itertools.product(range(side), repeat=dim)), dtype=torch.long)  # (H^D, D)
    strides = torch.tensor([side ** (dim - 1 - d) for d in range(dim)])
    num = coords.shape[0]
    next_state = torch.full((num, dim + 1), -1, dtype=torch.long)
    outcome_of = torch.full((num, dim + 1), -1, dtype=torch.long)
    for d in range(dim):
        movable = coords[:, d] < side - 1
        next_state[movable, d] = torch.nonzero(movable).flatten() + strides[d]
    outcome_of[:, dim] = torch.arange(num)
    valid = (next_state >= 0) | (outcome_of >= 0)
    rel = coords.float() / (side - 1) - 0.5
    in_ring = (rel.abs() > 0.25).all(-1)
    mode_bits = (rel > 0).long() @ (2 ** torch.arange(dim - 1, -1, -1))
    groups = [torch.nonzero(in_ring & (mode_bits == m)).flatten().tolist() for m in range(2**dim)]
    return TabularEnv(
        name="hypergrid",
        next_state=next_state,
        outcome_of=outcome_of,
        valid=valid,
        level=coords.sum(-1),
        outcome_rewards=hypergrid_reward(coords, side, r0, r1, r2),
        outcome_labels=[str(tuple(c)) for c in coords.tolist()],
        descriptors=coords.float(),
        archive_dims=[side] * dim,
        archive_ranges=[(-0.5, side - 0.5)] * dim,
        freq_groups=groups,
        freq_labels=[f"mode {m}" for m in range(2**dim)],
        initial_logits=torch.zeros(num, dim + 1),
    )


@dataclass(frozen=True)
class IdeaEnv:
    """Simulated idea generation (the execution-rewards paper, section 5): ideas x in R^dim, 8 quality peaks, execution
    noise.

    Q(x) = max_i h_i exp(-||x - c_i||^2 / (2 w_i^2)) with h_i = 0.5 + 0.3 i, w_i = 2 + 0.5 i. Peak centres
    (not given by the seed) are c_i = (2 + 2 i) u_i with u_i random unit vectors drawn from
    `landscape_seed`: better peaks lie farther out, so the ceiling rises with complexity ||x|| while
    P_exec = clip(1 / (1 + lam ||x||), 0.05, 0.95) falls, and h_i * P_exec(c_i) decreases with i
    (0.167 for the nearest peak, 0.153 for the farthest): expected return mildly prefers simple ideas.
    R(x) = Q(x) B + eps B, B ~ Bernoulli(P_exec), eps ~ N(0, noise^2).

    IPS needs a discrete outcome per idea (the IPS paper: an outcome is an equivalence class of solutions, such as
    a hypothesis up to equivalence or a Murcko scaffold). `outcome_key` offers three, see IDEA_OUTCOMES.
    """

    dim: int = 16
    num_prompts: int = 8
    num_peaks: int = 8
    exec_lambda: float = 1.0
    noise: float = 0.3
    landscape_seed: int = 0
    centres: torch.Tensor = field(init=False, repr=False)
    heights: torch.Tensor = field(init=False, repr=False)
    widths: torch.Tensor = field(init=False, repr=False)

    name = "ideas"
    archive_dims = [10, 10]
    archive_ranges = [(0.0, 1.0), (0.0, 1.0)]

    def __post_init__(self) -> None:
        if self.dim < 2:
            raise ValueError(f"ideas need --dim >= 2 (the behaviour uses x1, x2), got {self.dim}")
        if self.exec_lambda <= 0 or self.noise < 0:
            raise ValueError(f"ideas need --exec-lambda > 0 and --noise >= 0, got {self.exec_lambda}, {self.noise}")
        i = torch.arange(self.num_peaks, dtype=torch.float32)
        directions = torch.randn(self.num_peaks, self.dim, generator=torch.Generator().manual_seed(self.landscape_seed))
        directions = directions / directions.norm(dim=-1, keepdim=True)
        object.__setattr__(self, "heights", 0.5 + 0.3 * i)
        object.__setattr__(self, "widths", 2.0 + 0.5 * i)
        object.__setattr__(self, "centres", (2.0 + 2.0 * i)[:, None] * directions)

    def bumps(self, x: torch.Tensor) -> torch.Tensor:
        """Each peak's Gaussian bump h_i exp(-||x - c_i||^2 / (2 w_i^2)) at x (..., dim): (..., peaks)."""
        sq = ((x[..., None, :] - self.centres) ** 2).sum(-1)
        return self.heights * torch.exp(-sq / (2 * self.widths**2))

    def quality(self, x: torch.Tensor) -> torch.Tensor:
        """Q(x) (...,): the best peak's Gaussian bump at x (..., dim)."""
        return self.bumps(x).max(-1).values

    def exec_probability(self, x: torch.Tensor) -> torch.Tensor:
        """P_exec(x) = clip(1 / (1 + lambda ||x||), 0.05, 0.95)."""
        return (1.0 / (1.0 + self.exec_lambda * x.norm(dim=-1))).clamp(0.05, 0.95)

    def sample_rewards(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Stochastic execution reward R(x) = (Q(x) + eps) B of ideas x (..., dim)."""
        executed = (torch.rand(x.shape[:-1], generator=generator) < self.exec_probability(x)).float()
        eps = torch.randn(x.shape[:-1], generator=generator) * self.noise
        return (self.quality(x) + eps) * executed

    def behaviour(self, x: torch.Tensor) -> torch.Tensor:
        """The execution-rewards paper's behaviour b(x) = (sigmoid(||x|| - 3), atan2(x2, x1) / 2 pi + 0.5) in [0,
        1]^2."""
        return torch.stack(
            [torch.sigmoid(x.norm(dim=-1) - 3.0), torch.atan2(x[..., 1], x[..., 0]) / (2 * math.pi) + 0.5], dim=-1
        )

    def outcome_key(self, x: torch.Tensor, kind: str) -> torch.Tensor:
        """Discrete outcome (..., ) long of ideas x (..., dim) for IPS; `kind` is one of IDEA_OUTCOMES."""
        if kind == "peak":
            return self.bumps(x).argmax(-1)
        if kind not in IDEA_OUTCOMES or kind == "semantic":
            raise ValueError(f"unknown ideas outcome key {kind!r}; valid: {', '.join(IDEA_OUTCOMES)}")
        dims = self.archive_dims if kind == "cell" else [4, 4]
        grid = GridArchive(dims, self.archive_ranges)
        behaviour = self.behaviour(x)
        cells = grid.cell_index(behaviour.reshape(-1, 2).numpy())
        return torch.from_numpy(cells).view(behaviour.shape[:-1])


# IPS outcome of an idea. "peak": the peak whose bump gives Q(x), i.e. which of the 8 quality peaks (solution
# families) the idea belongs to. "grid4": a coarse 4 x 4 grid over the execution-rewards paper's behaviour b(x).
# "cell": the QD
# archive's 10 x 10 behaviour cell; with G = 16 about 14 of a group's 16 ideas fall in distinct cells, so every
# reward is scaled by about the same factor and group-std normalisation cancels IPS almost entirely.
# "semantic": classes of similar ideas found without the landscape (leader clustering of the idea vectors by cosine
# similarity, `divrl.core.LeaderClusters`, as `ips_outcome_key='semantic'` does for LLM text); kept per policy by
# the runner, so `IdeaEnv.outcome_key` does not compute it.
IDEA_OUTCOMES = ("peak", "grid4", "cell", "semantic")

