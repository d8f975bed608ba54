"""Toy environments: path counts, hyper-grid modes and reward, idea reward components, exact distributions."""

import itertools
import math

import pytest
import torch

from divrl.toy.envs import (
    MAX_HYPERGRID_CELLS,
    MULTIPLICITY_A,
    MULTIPLICITY_B,
    IdeaEnv,
    TabularEnv,
    hypergrid_reward,
    make_bandit,
    make_hypergrid,
    make_multiplicity_grid,
)
from divrl.toy.policies import TabularPolicy


def enumerate_outcome_paths(env: TabularEnv) -> dict[int, int]:
    """Brute force: follow every action sequence through the env's tables, count sequences per outcome."""
    counts: dict[int, int] = {}
    frontier = [0]
    while frontier:
        state = frontier.pop()
        for action in range(env.num_actions):
            if not env.valid[state, action]:
                continue
            outcome = int(env.outcome_of[state, action])
            if outcome >= 0:
                counts[outcome] = counts.get(outcome, 0) + 1
            else:
                frontier.append(int(env.next_state[state, action]))
    return counts


def reachable_outcomes(env: TabularEnv) -> set[int]:
    """Outcomes reachable from the start state (graph search over states, each visited once)."""
    seen, frontier, outcomes = {0}, [0], set()
    while frontier:
        state = frontier.pop()
        outcomes |= set(env.outcome_of[state][env.outcome_of[state] >= 0].tolist())
        for nxt in env.next_state[state][env.next_state[state] >= 0].tolist():
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return outcomes


def test_multiplicity_grid_has_35_and_7_paths():
    env = make_multiplicity_grid()
    counts = enumerate_outcome_paths(env)
    a, b = MULTIPLICITY_A[0], MULTIPLICITY_B[0]
    assert counts[a] == 35 and counts[b] == 7 and sum(counts.values()) == 2**7
    assert env.outcome_labels[a] == "(3,4)" and env.outcome_labels[b] == "(6,1)"
    assert env.outcome_rewards.tolist() == [1.0 if o in (a, b) else 0.0 for o in range(8)]
    # Under the uniform initial policy, outcome probability = paths / 2^7 (the multiplicity bias).
    uniform = TabularPolicy(env, 1).outcome_distribution(TabularPolicy(env, 1).params)[0]
    assert uniform[a].item() == pytest.approx(35 / 128) and uniform[b].item() == pytest.approx(7 / 128)
    assert env.outcome_freqs(env.target).tolist() == [0.5, 0.5]


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_hypergrid_has_two_to_the_d_modes(dim):
    env = make_hypergrid(dim=dim, side=8)
    assert len(env.freq_groups) == 2**dim
    top = env.outcome_rewards.max()
    assert top.item() == pytest.approx(0.1 + 0.5 + 2.0)
    best_cells = set(torch.nonzero(env.outcome_rewards == top).flatten().tolist())
    assert len(best_cells) == 2**dim
    for group in env.freq_groups:  # each mode region holds exactly one best cell, regions are disjoint
        assert len(best_cells & set(group)) == 1
    assert len(set().union(*map(set, env.freq_groups))) == sum(len(g) for g in env.freq_groups)
    # Every cell is reachable and is an outcome: H^D of them, each with its own stop action.
    assert env.num_outcomes == 8**dim and reachable_outcomes(env) == set(range(8**dim))


def test_hypergrid_reward_formula():
    side, r0, r1, r2 = 8, 0.01, 0.5, 2.0
    value = {cell: hypergrid_reward(torch.tensor(cell), side, r0, r1, r2).item() for cell in [(0, 0), (1, 1), (3, 3),
                                                                                             (1, 3), (6, 1), (7, 6)]}
    # u = x / 7; |u - 0.5| = 0.5 (x=0,7), 0.357 (x=1,6), 0.214 (x=2,5), 0.071 (x=3,4)
    assert value[(0, 0)] == pytest.approx(r0 + r1)  # outer ring only
    assert value[(1, 1)] == pytest.approx(r0 + r1 + r2) == pytest.approx(value[(6, 1)])
    assert value[(3, 3)] == pytest.approx(r0) == pytest.approx(value[(1, 3)])  # products need every dim
    assert value[(7, 6)] == pytest.approx(r0 + r1)


def test_exact_distribution_matches_sampling():
    env = make_hypergrid(dim=2, side=5)
    policy = TabularPolicy(env, 2)
    with torch.no_grad():
        policy.params["logits"].copy_(torch.randn(2, env.num_states, env.num_actions,
                                                  generator=torch.Generator().manual_seed(0)))
    exact = policy.outcome_distribution(policy.params)
    assert torch.allclose(exact.sum(-1), torch.ones(2))
    rollout = policy.sample(policy.params, policy.draw_noise(2, 20000, torch.Generator().manual_seed(1)))
    empirical = torch.stack([torch.bincount(o, minlength=env.num_outcomes) / 20000.0 for o in rollout.outcomes])
    assert (empirical - exact).abs().sum(-1).max() < 0.05
    # Episodes end exactly at their outcome: padded tokens are masked, every step was a valid action.
    assert (rollout.outcomes >= 0).all()
    assert env.valid[rollout.states[rollout.mask], rollout.actions[rollout.mask]].all()


def test_bandit_options_are_validated():
    env = make_bandit([1, 2, 3, 4], [0.5, 0, 0, 0])
    assert env.target.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])
    with pytest.raises(ValueError, match="initial-logits has 2 values but there are 4 arms"):
        make_bandit([1, 2, 3, 4], [0.0, 1.0])
    with pytest.raises(ValueError, match=">= 0"):
        make_bandit([1, -2])
    with pytest.raises(ValueError, match="at least 2 arms"):
        make_bandit([1])


def test_idea_peaks_and_reward_components():
    env = IdeaEnv()
    radii = env.centres.norm(dim=-1)
    assert torch.all(radii[1:] > radii[:-1])  # better peaks lie farther from the origin
    assert torch.allclose(env.heights, 0.5 + 0.3 * torch.arange(8.0))
    assert torch.allclose(env.widths, 2 + 0.5 * torch.arange(8.0))
    quality = env.quality(env.centres)
    assert torch.all(quality >= env.heights - 1e-6) and quality[-1].item() == pytest.approx(2.6)
    one_width = env.centres[3] + env.widths[3] * torch.nn.functional.normalize(torch.ones(16), dim=0)
    assert env.quality(one_width).item() >= env.heights[3].item() * math.exp(-0.5) - 1e-6
    assert env.exec_probability(torch.zeros(16)).item() == pytest.approx(0.95)  # clipped
    assert env.exec_probability(torch.full((16,), 100.0)).item() == pytest.approx(0.05)
    x = torch.zeros(16)
    x[0] = 3.0
    assert env.exec_probability(x).item() == pytest.approx(1 / (1 + 3.0))


def test_idea_rewards_follow_execution():
    noiseless = IdeaEnv(noise=0.0)
    x = noiseless.centres[2].expand(20000, -1)
    rewards = noiseless.sample_rewards(x, torch.Generator().manual_seed(0))
    executed = rewards != 0
    assert torch.allclose(rewards[executed], noiseless.quality(x[:1]).expand(int(executed.sum())))
    assert executed.float().mean().item() == pytest.approx(noiseless.exec_probability(x[0]).item(), abs=0.01)
    noisy = IdeaEnv().sample_rewards(x, torch.Generator().manual_seed(0))
    assert torch.equal(noisy != 0, executed)  # same execution draws; noise only on executed ideas
    assert (noisy[executed] - rewards[executed]).std().item() == pytest.approx(0.3, rel=0.05)


def test_idea_behaviour_is_in_unit_square():
    env = IdeaEnv()
    b = env.behaviour(torch.randn(1000, 16, generator=torch.Generator().manual_seed(0)) * 5)
    assert b.shape == (1000, 2) and (b >= 0).all() and (b <= 1).all()
    assert env.behaviour(torch.zeros(16))[0].item() == pytest.approx(1 / (1 + math.exp(3)))


def test_idea_env_rejects_bad_options():
    with pytest.raises(ValueError, match="exec-lambda"):
        IdeaEnv(exec_lambda=0.0)
    with pytest.raises(ValueError, match="dim >= 2"):
        IdeaEnv(dim=1)


def test_hypergrid_rejects_bad_options():
    with pytest.raises(ValueError, match="side"):
        make_hypergrid(dim=2, side=2)
    with pytest.raises(ValueError, match="r0 > 0"):
        make_hypergrid(r0=0.0)
    with pytest.raises(ValueError, match="r0 > 0"):
        make_hypergrid(r1=float("nan"))


def test_hypergrid_caps_the_number_of_cells():
    with pytest.raises(ValueError, match=r"--side 20 --dim 8 has 20\^8 = 2.56e\+10 cells; at most 100000"):
        make_hypergrid(dim=8, side=20)
    side = math.isqrt(MAX_HYPERGRID_CELLS)  # largest square grid under the cap is built
    assert make_hypergrid(dim=2, side=side).num_outcomes == side**2 <= MAX_HYPERGRID_CELLS
    with pytest.raises(ValueError, match="at most 100000"):
        make_hypergrid(dim=2, side=side + 1)


def test_idea_outcome_keys():
    env = IdeaEnv()
    # Each peak centre belongs to its own peak: the "peak" key separates the 8 solution families.
    assert env.outcome_key(env.centres, "peak").tolist() == list(range(8))
    ideas = torch.randn(5, 40, 16, generator=torch.Generator().manual_seed(0)) * 3
    for kind, cells in (("peak", 8), ("grid4", 16), ("cell", 100)):
        keys = env.outcome_key(ideas, kind)
        assert keys.shape == (5, 40) and keys.dtype == torch.long and 0 <= keys.min() and keys.max() < cells
    # grid4 is a coarsening of the 10 x 10 QD cell grid over the same behaviour b(x).
    b = env.behaviour(ideas)
    grid4 = (b * 4).floor().clamp(max=3).long()
    assert torch.equal(env.outcome_key(ideas, "grid4"), grid4[..., 0] * 4 + grid4[..., 1])
    with pytest.raises(ValueError, match="valid: peak, grid4, cell"):
        env.outcome_key(ideas, "scaffold")


def test_tables_are_consistent():
    for env in (make_bandit([1, 2]), make_multiplicity_grid(), make_hypergrid(dim=3, side=4)):
        moves, stops = env.next_state >= 0, env.outcome_of >= 0
        assert torch.equal(moves | stops, env.valid) and not (moves & stops).any()
        states = torch.nonzero(moves)
        assert (env.level[env.next_state[moves]] == env.level[states[:, 0]] + 1).all()  # layered DAG
        assert (env.next_state[moves] > states[:, 0]).all()  # numbered in topological order
        assert sorted(itertools.chain(*[s.tolist() for s in env.level_states])) == list(range(env.num_states))
