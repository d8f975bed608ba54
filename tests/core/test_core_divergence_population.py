"""f-divergence estimators, population soups and diversity metrics."""

import math

import pytest
import torch

from divrl.core import (
    DIVERGENCES,
    average_state_dicts,
    distinct_outcomes,
    empirical_distribution,
    exact_divergence,
    kl_divergence,
    l1_distance,
    lora_soup_delta,
    mean_pairwise_cosine_distance,
    outcome_entropy,
    per_token_divergence,
    perturb_relative_,
    policy_sample_divergence_loss,
    project_to_rank,
    select_top,
    selection_scores,
    truncated_importance_weights,
)


@pytest.fixture
def two_distributions():
    generator = torch.Generator().manual_seed(0)
    policy = torch.softmax(torch.randn(6, generator=generator, dtype=torch.float64), 0)
    reference = torch.softmax(torch.randn(6, generator=generator, dtype=torch.float64), 0)
    return policy, reference


def test_exact_divergences_match_textbook_formulas(two_distributions):
    pi, mu = two_distributions
    mid = (pi + mu) / 2
    textbook = {
        "reverse_kl": (pi * (pi / mu).log()).sum(),
        "forward_kl": (mu * (mu / pi).log()).sum(),
        "js": 0.5 * (mu * (mu / mid).log()).sum() + 0.5 * (pi * (pi / mid).log()).sum(),
        "alpha": 4 * (1 - (pi * mu).sqrt().sum()),  # alpha = 0.5: 4 (1 - Bhattacharyya coefficient)
    }
    for kind in DIVERGENCES:
        assert float(exact_divergence(pi, mu, kind)) == pytest.approx(float(textbook[kind]), rel=1e-9)


def test_alpha_limits_are_the_two_kls(two_distributions):
    pi, mu = two_distributions
    def value(kind: str, alpha: float = 0.5) -> float:
        return float(exact_divergence(pi, mu, kind, alpha=alpha))

    assert value("alpha", 1.0) == pytest.approx(value("forward_kl"))
    assert value("alpha", 0.0) == pytest.approx(value("reverse_kl"))
    assert value("alpha", 0.999) == pytest.approx(value("forward_kl"), rel=1e-2)  # continuous at the limit


@pytest.mark.parametrize("kind", DIVERGENCES)
@pytest.mark.parametrize("source", ["policy", "reference"])
def test_estimators_agree_in_expectation_with_exact_values(two_distributions, kind, source):
    pi, mu = two_distributions
    # The expectation over the sampling distribution, computed exactly (no Monte-Carlo noise).
    sampler = pi if source == "policy" else mu
    support = torch.arange(pi.numel())
    values = per_token_divergence(pi.log()[support], mu.log()[support], kind, samples_from=source)
    assert float((sampler * values).sum()) == pytest.approx(float(exact_divergence(pi, mu, kind)), rel=1e-9)
    assert (values >= -1e-12).all()  # every per-token value is non-negative


def _expected_surrogate_gradient(logits, reference, kind, behaviour=None):
    """d/dlogits of E_{y ~ behaviour}[loss(y)], the expectation taken exactly over the 6 outcomes."""
    logp = torch.log_softmax(logits, 0)
    sampler = logp.exp().detach() if behaviour is None else behaviour
    weight = None if behaviour is None else logp.exp().detach() / behaviour
    loss = policy_sample_divergence_loss(logp, reference.log(), kind, sample_weight=weight)
    return torch.autograd.grad((sampler * loss).sum(), logits)[0]


@pytest.mark.parametrize("kind", DIVERGENCES)
def test_policy_sample_loss_has_the_divergence_gradient(two_distributions, kind):
    pi, mu = two_distributions
    logits = pi.log().clone().requires_grad_(True)
    exact = torch.autograd.grad(exact_divergence(torch.softmax(logits, 0), mu, kind), logits)[0]
    assert torch.allclose(_expected_surrogate_gradient(logits, mu, kind), exact, atol=1e-12)
    # Samples from another policy, reweighted by pi / pi_old, give the same expected gradient.
    old = torch.softmax(torch.linspace(-1.0, 1.0, 6, dtype=torch.float64), 0)
    assert torch.allclose(_expected_surrogate_gradient(logits, mu, kind, behaviour=old), exact, atol=1e-12)
    # Its value is the estimate itself; the pathwise gradient of the estimate alone is a different vector.
    logp = torch.log_softmax(logits, 0)
    assert torch.allclose(policy_sample_divergence_loss(logp, mu.log(), kind),
                          per_token_divergence(logp, mu.log(), kind))
    pathwise = torch.autograd.grad((pi * per_token_divergence(logp, mu.log(), kind)).sum(), logits)[0]
    assert not torch.allclose(pathwise, exact, atol=1e-6)


def test_k3_as_loss_has_the_forward_kl_gradient(two_distributions):
    """Why divrl does not train on k3 directly: its pathwise gradient is the forward KL's (documented)."""
    pi, mu = two_distributions
    logits = pi.log().clone().requires_grad_(True)
    logp = torch.log_softmax(logits, 0)
    pathwise = torch.autograd.grad((pi * per_token_divergence(logp, mu.log(), "reverse_kl")).sum(), logits)[0]
    forward = torch.autograd.grad(exact_divergence(torch.softmax(logits, 0), mu, "forward_kl"), logits)[0]
    assert torch.allclose(pathwise, forward, atol=1e-12)


def test_exact_divergence_refuses_zero_policy_mass_and_shape_mismatch():
    with pytest.raises(ValueError, match="p_policy > 0"):
        exact_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), "forward_kl")
    with pytest.raises(ValueError, match="shape"):
        exact_divergence(torch.tensor([1.0]), torch.tensor([0.5, 0.5]), "js")
    # Outcomes neither distribution takes contribute nothing.
    value = exact_divergence(torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.25, 0.75, 0.0]), "reverse_kl")
    assert float(value) == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(0.5 / 0.75))


def test_reverse_kl_on_policy_samples_is_trl_k3():
    logp, logr = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.5, -1.0, -0.5])
    k3 = torch.exp(logr - logp) - (logr - logp) - 1
    assert torch.allclose(per_token_divergence(logp, logr, "reverse_kl"), k3)


def test_divergence_is_differentiable_and_rejects_unknown():
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    per_token_divergence(logp, torch.tensor([-1.2, -0.3]), "js").sum().backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()
    with pytest.raises(ValueError, match="forward_kl"):
        per_token_divergence(logp, logp.detach(), "hellinger")


def test_divergence_is_finite_for_extreme_log_ratios():
    values = per_token_divergence(torch.tensor([0.0, -200.0]), torch.tensor([-200.0, 0.0]), "forward_kl")
    assert torch.isfinite(values).all()


def test_truncated_importance_weights_bound_the_variance():
    # Issue 14.6: pi / pi_old was clamped only at e^20, so a few stale tokens could dominate the divergence term.
    generator = torch.Generator().manual_seed(0)
    log_ratio = 3.0 * torch.randn(100_000, generator=generator)  # heavy-tailed ratios, as after several steps
    values = torch.rand(100_000, generator=generator)  # per-token divergence values
    low, high = 0.8, 1.28  # TRL's [1 - epsilon, 1 + epsilon_high] with epsilon 0.2, epsilon_high 0.28
    weights = truncated_importance_weights(log_ratio, low, high)
    assert float(weights.min()) >= low and float(weights.max()) <= high
    assert float(weights.var()) <= ((high - low) / 2) ** 2  # Popoviciu: a variable in [a, b] has Var <= (b-a)^2/4
    assert float((weights * values).square().mean()) <= high**2 * float(values.square().mean())
    raw = log_ratio.exp()
    assert float((raw * values).square().mean()) > 1e6 * float(values.square().mean())  # what it replaces
    near = torch.tensor([-0.1, 0.0, 0.2])  # inside the trust region the weight is the exact ratio
    torch.testing.assert_close(truncated_importance_weights(near, low, high), near.exp())
    cispo = truncated_importance_weights(torch.tensor([-50.0, 0.0, 50.0]), None, 5.0)  # CISPO: from above only
    torch.testing.assert_close(cispo, torch.tensor([math.exp(-50.0), 1.0, 5.0]))
    assert not truncated_importance_weights(near.requires_grad_(), low, high).requires_grad
    with pytest.raises(ValueError, match="importance weight bounds"):
        truncated_importance_weights(near, 1.5, 1.2)


def test_selection_and_top_m():
    scores = selection_scores(torch.tensor([0.5, 1.0, 0.2]), torch.tensor([1.0, 0.0, 4.0]))
    assert torch.allclose(scores, torch.tensor([1.0, 1.0, 1.0]))
    assert select_top(torch.tensor([0.1, 0.9, 0.5, 0.9]), 3) == [1, 3, 2]
    with pytest.raises(ValueError, match="M=4"):
        select_top(torch.tensor([1.0, 2.0]), 4)


def test_average_state_dicts():
    a, b = {"w": torch.tensor([0.0, 2.0])}, {"w": torch.tensor([2.0, 4.0])}
    assert torch.allclose(average_state_dicts([a, b])["w"], torch.tensor([1.0, 3.0]))
    assert torch.allclose(average_state_dicts([a, b], [3, 1])["w"], torch.tensor([0.5, 2.5]))
    assert torch.equal(average_state_dicts([a])["w"], a["w"])
    with pytest.raises(ValueError, match="parameter names"):
        average_state_dicts([a, {"v": torch.zeros(2)}])


def test_lora_soup_is_exact_in_delta_space():
    generator = torch.Generator().manual_seed(1)
    members = [(torch.randn(4, 7, generator=generator), torch.randn(5, 4, generator=generator), 2.0) for _ in range(3)]
    weights = [0.5, 0.3, 0.2]
    expected = sum(w * s * b @ a for w, (a, b, s) in zip(weights, members))
    assert torch.allclose(lora_soup_delta(members, weights), expected, atol=1e-5)
    a, b, s = members[0]
    assert torch.allclose(lora_soup_delta([members[0]]), s * b @ a)  # soup of one adapter is that adapter
    assert torch.allclose(lora_soup_delta([members[0]] * 3), s * b @ a, atol=1e-5)  # K identical adapters


def test_rank_projection_error_is_discarded_singular_values():
    generator = torch.Generator().manual_seed(2)
    delta = torch.randn(8, 6, generator=generator)
    a, b, error = project_to_rank(delta, 3, scale=2.0)
    sigma = torch.linalg.svdvals(delta)
    assert error == pytest.approx(float((sigma[3:] ** 2).sum().sqrt() / (sigma**2).sum().sqrt()), rel=1e-5)
    assert float(torch.linalg.norm(delta - 2.0 * b @ a) / torch.linalg.norm(delta)) == pytest.approx(error, rel=1e-4)
    a, b, error = project_to_rank(delta, 10, scale=2.0)  # rank above min dims: exact, zero-padded
    assert a.shape == (10, 6) and b.shape == (8, 10) and error == pytest.approx(0.0, abs=1e-6)
    assert torch.allclose(2.0 * b @ a, delta, atol=1e-4)


def test_relative_restart_noise_on_a_tensor_moves_it_by_sigma_times_its_norm():
    x = torch.randn(50, 20, generator=torch.Generator().manual_seed(1))
    y, z = x.clone(), x.clone()
    assert perturb_relative_([y], 0.2, torch.Generator().manual_seed(0)) == [0.2]
    perturb_relative_([z], 0.2, torch.Generator().manual_seed(0))
    assert torch.equal(y, z)  # seeded
    assert float((y - x).norm() / x.norm()) == pytest.approx(0.2, rel=1e-5)
    scaled = 1e-3 * x  # scale-free: the same relative move at any weight scale
    before = scaled.clone()
    perturb_relative_([scaled], 0.2, torch.Generator().manual_seed(0))
    assert float((scaled - before).norm() / before.norm()) == pytest.approx(0.2, rel=1e-5)
    zero, ones = torch.zeros(3), torch.ones(3)
    assert perturb_relative_([zero, ones], 0.0) == [0.0, 0.0]
    assert perturb_relative_([zero], 0.5) == [0.0] and torch.equal(zero, torch.zeros(3))  # nothing to be relative to
    with pytest.raises(ValueError, match="sigma"):
        perturb_relative_([ones], -0.1)


def test_relative_restart_keeps_a_gemma_sized_lora_layer_within_sigma_of_the_soup():
    # Issue 14.1: a Gemma-3-4B MLP projection (2560 -> 10240), r = 16, factors of a soup's size (entries ~1e-3).
    # Absolute N(0, 0.01^2) on A and B moved dW by ~77x ||dW_soup||; the restart must move it by exactly sigma.
    generator = torch.Generator().manual_seed(0)
    rank, scale = 16, 2.0
    lora_a = 1e-3 * torch.randn(rank, 2560, generator=generator)
    lora_b = 1e-3 * torch.randn(10240, rank, generator=generator)
    soup = scale * lora_b @ lora_a
    for sigma in (0.05, 0.2, 1.0):
        a, b = lora_a.clone(), lora_b.clone()
        assert perturb_relative_([(a, b, scale)], sigma, torch.Generator().manual_seed(1)) == [sigma]
        moved = float(torch.linalg.norm(scale * b @ a - soup) / torch.linalg.norm(soup))
        assert moved == pytest.approx(sigma, rel=1e-3)
        assert not torch.equal(a, lora_a) and not torch.equal(b, lora_b)


def test_relative_restart_revives_empty_rank_slots_and_leaves_a_fresh_adapter():
    generator = torch.Generator().manual_seed(0)
    lora_a, lora_b = torch.randn(4, 12, generator=generator), torch.randn(10, 4, generator=generator)
    lora_a[3], lora_b[:, 3] = 0.0, 0.0  # a soup of rank 3 in a rank-4 adapter
    soup = 0.5 * lora_b @ lora_a
    perturb_relative_([(lora_a, lora_b, 0.5)], 0.1, torch.Generator().manual_seed(2))
    assert float(torch.linalg.norm(0.5 * lora_b @ lora_a - soup) / torch.linalg.norm(soup)) == pytest.approx(0.1,
                                                                                                         rel=1e-4)
    assert lora_a[3].abs().sum() > 0 and lora_b[:, 3].abs().sum() > 0  # the empty slot can learn again
    fresh_a, fresh_b = torch.randn(4, 12, generator=generator), torch.zeros(10, 4)  # PEFT's init: B = 0, dW = 0
    kept_a = fresh_a.clone()
    assert perturb_relative_([(fresh_a, fresh_b, 0.5)], 0.1) == [0.0]
    assert torch.equal(fresh_a, kept_a) and torch.equal(fresh_b, torch.zeros(10, 4))


def test_diversity_metrics():
    assert mean_pairwise_cosine_distance(torch.eye(3)) == pytest.approx(1.0)
    assert mean_pairwise_cosine_distance(torch.ones(4, 2)) == pytest.approx(0.0, abs=1e-6)
    assert distinct_outcomes(["a", "b", "a", None]) == 2
    p = empirical_distribution(["a", "b", "a", None], ["a", "b"])
    assert p.tolist() == [0.5, 0.25]
    assert outcome_entropy([0.5, 0.5, 0.0]) == pytest.approx(0.6931, abs=1e-4)
    assert l1_distance([0.1, 0.9], [0.3, 0.7]) == pytest.approx(0.4)
    assert kl_divergence([0.5, 0.5], [0.25, 0.75]) == pytest.approx(0.5 * math.log(2.0) + 0.5 * math.log(2 / 3))
    assert kl_divergence([1.0, 0.0], [0.0, 1.0]) == pytest.approx(math.log(1e12))  # missed mode: floored, finite
    with pytest.raises(ValueError, match="supports"):
        l1_distance([1.0], [0.5, 0.5])
