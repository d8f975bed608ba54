"""Toy FlowRL: the wiring of core.trajectory_balance_loss, its large-group fixed points and the CLI."""

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from divrl.cli import main
from divrl.methods import LossStep
from divrl.toy.envs import IdeaEnv, make_bandit, make_hypergrid, make_multiplicity_grid
from divrl.toy.fixed_points import (
    closest_interior_fixed_point,
    flowrl_fixed_points,
    outcome_lengths,
    reference_distribution,
)
from divrl.toy.methods import Method
from divrl.toy.policies import Rollout
from divrl.toy.runner import TABULAR_METRICS, TrainConfig, Trainer, _toy_loss_context, single_thread, train

BANDIT = make_bandit([1, 2, 3, 4])


def run_steps(env, method: str, cfg: TrainConfig, seeds: list[int], steps: int, average_from: int):
    """Train a Trainer step by step; returns it with the mean outcome distribution (P, O) and log Z (P, prompts)
    over steps >= average_from."""
    trainer = Trainer(env, Method.parse(method), cfg, seeds)
    dists, log_zs = [], []
    with single_thread():
        for step in range(steps):
            trainer.step(step)
            if step >= average_from:
                dists.append(trainer.policy.outcome_distribution(trainer.params).double())
                log_zs.append(trainer.log_z.detach().clone())
    return trainer, torch.stack(dists).mean(0).numpy(), torch.stack(log_zs).mean(0).numpy()


def test_flowrl_is_a_component():
    assert "flowrl" in Method.parse("flowrl") and "flowrl" not in Method.parse("ips")
    assert Method.parse("pop+ips+flowrl").components == {"pop", "ips", "flowrl"}
    with pytest.raises(ValueError, match="--flowrl-beta must be > 0"):
        TrainConfig(steps=1, group_size=4, lr=0.1, flowrl_beta=0.0)


def test_trajectory_balance_wiring_matches_a_hand_computation():
    """Residual log Z + log pi - beta r_hat - log pi_ref with the initial policy as reference, weight clipped
    pi / pi_old, mean over the member's samples (the bandit's episodes have length 1)."""
    cfg = TrainConfig(steps=1, group_size=4, lr=0.1, flowrl_beta=2.0, clip=0.2)
    trainer = Trainer(BANDIT, Method.parse("flowrl"), cfg, [0])
    arms = torch.tensor([[0, 0, 1, 3]])
    rollout = Rollout(actions=arms[..., None], states=torch.zeros_like(arms)[..., None],
                      mask=torch.ones(1, 4, 1, dtype=torch.bool), outcomes=arms)
    logits, old_logits = [0.5, 0.0, -0.5, 1.0], [0.5, 0.4, 0.0, 0.0]
    with torch.no_grad():
        trainer.params["logits"][0, 0] = torch.tensor(logits)
        trainer.log_z.fill_(0.3)
    old_logp = torch.log_softmax(torch.tensor(old_logits), -1)[arms][..., None]
    logp = trainer.policy.evaluate(trainer.params, rollout)[0]
    ref_logp = trainer.policy.evaluate(trainer.reference, rollout)[0]
    r_hat = torch.tensor([[0.5, 0.5, -1.0, 1.5]])
    loss = trainer.trajectory_balance(rollout, logp, old_logp, ref_logp, r_hat)

    def softmax(z: list[float]) -> list[float]:
        return [math.exp(v) / sum(math.exp(u) for u in z) for v in z]

    p, p_old = softmax(logits), softmax(old_logits)
    terms = []
    for arm, a in zip([0, 0, 1, 3], [0.5, 0.5, -1.0, 1.5]):
        weight = min(max(p[arm] / p_old[arm], 0.8), 1.2)
        terms.append(weight * (0.3 + math.log(p[arm]) - 2.0 * a - math.log(0.25)) ** 2)
    assert loss.shape == (1,) and loss.item() == pytest.approx(sum(terms) / 4, rel=1e-5)
    assert {min(max(p[a] / p_old[a], 0.8), 1.2) for a in (0, 1, 3)} == {p[0] / p_old[0], 0.8, 1.2}  # both clips hit


def test_toy_flowrl_loss_equals_the_flowrl_method_objects_on_shared_inputs():
    """The toy cannot run FlowRL's method object, whose log Z is a head over the model's prompt pass (the toy's is one
    scalar per member and prompt), so it runs `core.trajectory_balance_loss`: given the toy's log Z as its head's
    output, the method object's `objective_term` is the toy's loss, member by member (variable lengths, pi != pi_old,
    the importance weight clipped both ways)."""
    env = make_hypergrid(dim=2, side=5)
    cfg = TrainConfig(steps=1, group_size=8, lr=0.05, flowrl_beta=2.0)
    trainer = Trainer(env, Method.parse("flowrl"), cfg, [0, 1])
    rollout = trainer._sample(trainer.params, trainer.batch)
    old = trainer.policy.evaluate(trainer.params, rollout)[0].detach()
    noise = torch.Generator().manual_seed(0)
    with torch.no_grad():
        trainer.params["logits"].add_(torch.randn(trainer.params["logits"].shape, generator=noise))
        trainer.log_z.copy_(torch.tensor([[0.5], [-1.0]]))
    logp, ref = (trainer.policy.evaluate(params, rollout)[0] for params in (trainer.params, trainer.reference))
    advantages = torch.randn(2, 8, generator=noise)
    toy = trainer.trajectory_balance(rollout, logp, old, ref.detach(), advantages)
    weights = (logp - old).sum(-1).exp()
    assert (weights < 0.8).any() and (weights > 1.2).any() and (rollout.lengths.min() < rollout.lengths.max())
    context = dataclasses.replace(_toy_loss_context(cfg), causal_lm=lambda model: None)
    for member in range(2):
        flowrl = trainer.member_methods[member]["flowrl"]
        flowrl.head = lambda pooled, member=member: trainer.log_z[member, 0].expand(len(pooled))
        flowrl._pooled_prompts = lambda *_: torch.zeros(8, 1)  # the prompt pass the toy has no model for
        inputs = {"advantages": advantages[member], "old_per_token_logps": old[member],
                  "ref_per_token_logps": ref[member].detach(), "prompt_ids": None, "prompt_mask": None}
        step = LossStep(context=context, model=None, inputs=inputs, per_token_logps=logp[member], entropies=None,
                        mask=rollout.mask[member].float(), entropy_mask=None, accumulation=1.0, mode="train")
        assert torch.allclose(flowrl.objective_term(step), toy[member], rtol=1e-6)


def test_ideas_learn_one_log_z_per_prompt():
    env = IdeaEnv()
    cfg = TrainConfig(steps=1, group_size=4, lr=3e-4)
    trainer = Trainer(env, Method.parse("flowrl"), cfg, [0, 1])
    assert trainer.log_z.shape == (2, env.num_prompts)
    rollout = trainer._sample(trainer.params, trainer.batch)
    logp = trainer.policy.evaluate(trainer.params, rollout)[0]
    ref_logp = trainer.policy.evaluate(trainer.reference, rollout)[0]
    r_hat = torch.randn(rollout.outcomes.shape[:2], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        trainer.log_z.copy_(torch.randn(2, env.num_prompts, generator=torch.Generator().manual_seed(1)))
    trainer.trajectory_balance(rollout, logp.detach(), logp.detach(), ref_logp, r_hat).sum().backward()
    # d loss / d log Z[m, j] = 2 / N * sum of the residuals of member m's samples of prompt j (weight 1 on-policy)
    residual = (trainer.log_z.detach()[:, rollout.states] + (logp.detach() - ref_logp).sum(-1) / env.dim
                - trainer.method_args.flowrl_beta * r_hat)
    expected = torch.stack([2 * residual[:, rollout.states == j].sum(1) for j in range(env.num_prompts)], 1)
    assert torch.allclose(trainer.log_z.grad, expected / rollout.states.numel(), rtol=1e-4, atol=1e-5)


def test_bandit_reaches_flowrls_own_fixed_point_and_learns_its_log_z():
    """beta 0.5 < beta_max: pi = pi_ref exp(beta r_hat - log Z) with r_hat = (r - mu_pi) / sigma_pi, which is
    not the reward-proportional target."""
    fixed = flowrl_fixed_points(BANDIT, 0.5)
    assert fixed.beta_max == pytest.approx(0.862, abs=1e-3) and len(fixed.points) == 2
    cfg = TrainConfig(steps=1, group_size=64, lr=0.02, flowrl_beta=0.5)
    _, dist, log_z = run_steps(BANDIT, "flowrl", cfg, [1, 2], steps=300, average_from=100)
    to_fixed = np.abs(dist - fixed.points[0]).sum(1)
    to_target = np.abs(dist - BANDIT.target.numpy()).sum(1)
    assert (to_fixed < 0.03).all() and (to_target > 0.08).all(), (to_fixed, to_target)
    assert np.allclose(log_z[:, 0], fixed.log_z[0], atol=0.03), (log_z, fixed.log_z)


def test_bandit_collapses_above_beta_max():
    assert flowrl_fixed_points(BANDIT, 15.0).points == []
    run = train(BANDIT, "flowrl", TrainConfig(steps=300, group_size=64, lr=0.02), [1, 2])
    assert (run.curves["max_outcome_prob"][:, -10:].mean(1) > 0.95).all()


def test_multiplicity_keeps_the_reference_path_ratio():
    """A and B pay the same and take 7 steps, so FlowRL keeps pi_ref's 35 : 7 (B share 1/6), unlike GRPO (-> 0)
    and IPS (-> 1/2)."""
    env = make_multiplicity_grid()
    fixed = flowrl_fixed_points(env, 0.05)
    point = env.outcome_freqs(torch.tensor(fixed.points[0])).numpy()
    assert point[1] / point.sum() == pytest.approx(1 / 6)
    cfg = TrainConfig(steps=1, group_size=32, lr=0.05, flowrl_beta=0.05)
    _, dist, _ = run_steps(env, "flowrl", cfg, [3], steps=150, average_from=100)
    freqs = env.outcome_freqs(torch.tensor(dist)).numpy()[0]
    assert np.abs(freqs - point).max() < 0.03 and 0.13 < freqs[1] / freqs.sum() < 0.21, (freqs, point)


def test_fixed_point_helpers():
    grid = make_hypergrid(dim=2, side=4)
    assert outcome_lengths(grid).tolist() == [x + y + 1 for x in range(4) for y in range(4)]
    assert reference_distribution(BANDIT) == pytest.approx([0.25] * 4)
    assert reference_distribution(grid).sum() == pytest.approx(1.0)
    limit = flowrl_fixed_points(grid, 100.0).concentration_limit
    best = grid.outcome_rewards == grid.outcome_rewards.max()
    assert limit[~best.numpy()].sum() == pytest.approx(0.0, abs=1e-12) and limit.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="beta must be > 0"):
        flowrl_fixed_points(BANDIT, 0.0)


def test_closest_interior_fixed_point_is_a_fixed_point_no_beta_beats():
    beta, dist = closest_interior_fixed_point(BANDIT)
    fixed = flowrl_fixed_points(BANDIT, beta)
    assert 0 < beta < fixed.beta_max and np.allclose(dist, fixed.points[0], atol=1e-3)
    target = BANDIT.target.numpy()
    best = np.abs(dist - target).sum()
    for other in (0.25, 0.5, 0.75):
        assert best <= np.abs(flowrl_fixed_points(BANDIT, other).points[0] - target).sum()
    assert best > 0.05  # exp(t r) cannot equal r / sum r


def test_runs_are_deterministic_and_population_soups_log_z():
    env = make_hypergrid(dim=2, side=5)
    cfg = TrainConfig(steps=12, group_size=8, lr=0.05, population_size=3, population_interval=4, population_top_m=2,
                      population_sigma=0.0, flowrl_beta=1.0)
    first, second = train(env, "pop+flowrl", cfg, [7, 8]), train(env, "pop+flowrl", cfg, [7, 8])
    for name in TABULAR_METRICS:
        assert np.array_equal(first.curves[name], second.curves[name])
    alone = train(env, "pop+flowrl", cfg, [8])
    assert np.allclose(alone.curves["l1_to_target"][0], first.curves["l1_to_target"][1], atol=1e-6)
    trainer = Trainer(env, Method.parse("pop+flowrl"), cfg, [7, 8])
    with torch.no_grad():
        trainer.log_z.copy_(torch.arange(6.0)[:, None])
    rollout, rewards, _ = trainer.step(0)
    trainer.population_step(rollout, rewards)
    log_z = trainer.log_z.detach().flatten()
    assert torch.equal(log_z[:3], log_z[:1].expand(3)) and torch.equal(log_z[3:], log_z[3:4].expand(3))
    assert log_z[0] < 2.1 < 2.9 < log_z[3]  # each seed's soup of its own members' log Z


def test_cli_runs_flowrl_with_beta(capsys, tmp_path):
    code = main(["toy", "--env", "bandit", "--methods", "grpo,flowrl", "--seeds", "1", "--steps", "5",
                 "--flowrl-beta", "0.5", "--out", str(tmp_path), "--quiet", "--no-plots"])
    assert code == 0
    doc = json.loads((tmp_path / "metrics.json").read_text())
    assert list(doc["methods"]) == ["grpo", "flowrl"] and doc["config"]["flowrl_beta"] == 0.5
    assert doc["methods"]["flowrl"]["settings"]["flowrl_beta"] == 0.5 and doc["methods"]["flowrl"]["settings"]["flowrl"]
    assert main(["toy", "--env", "bandit", "--methods", "flowrl", "--flowrl-beta", "-1", "--out",
                 str(tmp_path / "bad"), "--quiet"]) == 2
    assert "--flowrl-beta must be > 0, got -1.0" in capsys.readouterr().err
