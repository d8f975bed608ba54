"""Diversity metrics: the zero-vector convention of the mean pairwise cosine distance."""

import pytest
import torch

from divrl.core import hashed_ngram_embedding, mean_pairwise_cosine_distance


def test_identical_zero_rows_have_no_diversity():
    assert mean_pairwise_cosine_distance(torch.zeros(4, 3)) == 0.0
    # Empty texts embed as zero vectors: a batch of them is collapsed, not maximally diverse.
    assert mean_pairwise_cosine_distance(hashed_ngram_embedding(["", "", ""])) == 0.0


def test_zero_row_is_unrelated_to_non_zero_rows():
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
    # pairs: (zero, a) -> 1, (zero, b) -> 1, (a, b) -> 0
    assert mean_pairwise_cosine_distance(x) == pytest.approx(2 / 3)
    two_zero = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    # pairs: (zero, zero) -> 0, each zero with [0, 1] -> 1
    assert mean_pairwise_cosine_distance(two_zero) == pytest.approx(2 / 3)


def test_non_zero_rows_are_unchanged():
    assert mean_pairwise_cosine_distance(torch.eye(3)) == pytest.approx(1.0)
    assert mean_pairwise_cosine_distance(torch.tensor([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(2.0)
    assert mean_pairwise_cosine_distance(torch.zeros(1, 3)) == 0.0
