"""Clip-Cov / KL-Cov token selection: covariance per token, bounded random choice, top-k."""

from __future__ import annotations

import torch

from divrl.core import clip_cov_selection, kl_cov_selection, token_covariance


def test_covariance_centres_over_the_masked_tokens_only() -> None:
    logps = torch.tensor([[-1.0, -3.0, 9.0], [-2.0, -2.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    cov = token_covariance(logps, torch.tensor([1.0, -1.0]), mask)
    # mean A = 0, mean log pi = -2 over the four valid tokens
    assert cov[:, :2].tolist() == [[1.0, -1.0], [0.0, 0.0]]
    assert torch.isinf(cov[:, 2]).all()


def test_clip_cov_draws_within_bounds_skipping_excluded_tokens() -> None:
    cov = torch.tensor([[0.5, 2.0, 3.0, 6.0], [2.5, 4.0, -torch.inf, 1.5]])
    excluded = torch.zeros(2, 4, dtype=torch.bool)
    excluded[0, 1] = True
    picked = clip_cov_selection(cov, ratio=1.0, low=1.0, high=5.0, excluded=excluded,
                                generator=torch.Generator().manual_seed(0))
    assert picked.tolist() == [[False, False, True, False], [True, True, False, True]]
    one = clip_cov_selection(cov, ratio=1e-4, low=1.0, high=5.0, generator=torch.Generator().manual_seed(0))
    assert int(one.sum()) == 1 and bool(((cov > 1) & (cov < 5))[one].all())  # at least one token per batch


def test_kl_cov_takes_the_largest_covariances() -> None:
    cov = torch.tensor([[0.5, 2.0, -torch.inf], [9.0, -4.0, 3.0]])
    assert kl_cov_selection(cov, ratio=0.4).tolist() == [[False, False, False], [True, False, True]]
    assert kl_cov_selection(torch.full((1, 2), -torch.inf), ratio=0.5).sum() == 0


def test_ppo_clipped_marks_the_tokens_whose_surrogate_is_at_its_clip() -> None:
    from divrl.core import ppo_clipped

    log_ratio = torch.log(torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 0.9]]))
    # A > 0: clipped above 1 + 0.2 only; A < 0: clipped below 1 - 0.2 only
    assert ppo_clipped(torch.tensor([1.0, -1.0]), log_ratio, 0.2, 0.2).tolist() == [[True, False, False],
                                                                                    [False, True, False]]
