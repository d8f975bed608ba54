"""FlowRL trajectory-balance loss against a hand computation, and its optimum."""

import math

import pytest
import torch

from divrl.core.flowrl import trajectory_balance_loss


def test_loss_matches_hand_computation():
    log_z = torch.tensor([0.5, -0.2])
    policy, ref = torch.tensor([-6.0, -3.0]), torch.tensor([-4.0, -3.5])
    lengths, rewards = torch.tensor([3, 1]), torch.tensor([1.0, -1.0])
    old = torch.tensor([-6.5, -2.0])
    loss = trajectory_balance_loss(log_z, policy, ref, lengths, rewards, beta_r=0.1, seq_logp_old=old,
                                   importance_clip=0.2)
    residual = torch.tensor([0.5 + (-6.0) / 3 - 0.1 - (-4.0) / 3, -0.2 - 3.0 + 0.1 + 3.5])
    weight = torch.tensor([min(math.exp(0.5), 1.2), max(math.exp(-1.0), 0.8)])  # clipped to [0.8, 1.2]
    assert torch.allclose(loss, weight * residual**2)


def test_gradients_reach_policy_and_log_z_only():
    log_z = torch.zeros(2, requires_grad=True)
    policy = torch.tensor([-2.0, -1.0], requires_grad=True)
    ref = torch.tensor([-1.0, -1.0], requires_grad=True)
    rewards = torch.tensor([1.0, 0.0], requires_grad=True)
    trajectory_balance_loss(log_z, policy, ref, torch.tensor([2, 2]), rewards).sum().backward()
    assert log_z.grad is not None and policy.grad is not None
    assert ref.grad is None and rewards.grad is None


def test_minimising_matches_reward_tilted_reference():
    # One prompt, three one-token answers: the optimum is pi ~ pi_ref * exp(beta r).
    ref = torch.log(torch.tensor([0.5, 0.3, 0.2]))
    rewards = torch.tensor([0.0, 1.0, 2.0])
    logits = torch.zeros(3, requires_grad=True)
    log_z = torch.zeros(1, requires_grad=True)
    optimiser = torch.optim.Adam([logits, log_z], lr=0.05)
    for _ in range(3000):
        logp = torch.log_softmax(logits, 0)
        # exact expectation over answers (uniform weights: every answer is scored each step)
        loss = trajectory_balance_loss(log_z.expand(3), logp, ref, torch.ones(3), rewards, beta_r=0.5).sum()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    target = torch.softmax(ref + 0.5 * rewards, 0)
    assert torch.allclose(torch.softmax(logits, 0), target, atol=1e-3)


def test_shape_mismatch_is_named():
    with pytest.raises(ValueError, match="equal shape"):
        trajectory_balance_loss(torch.zeros(2), torch.zeros(3), torch.zeros(3), torch.ones(3), torch.zeros(3))
