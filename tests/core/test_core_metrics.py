"""Diversity metrics: the zero-vector convention of the mean pairwise cosine distance, Vendi scores."""

import math

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


def test_vendi_score_is_the_effective_number_of_distinct_items() -> None:
    from divrl.core import vendi_score, vendi_score_of_keys

    assert vendi_score(torch.ones(5, 5)) == pytest.approx(1.0)  # five copies of one item
    assert vendi_score(torch.eye(3)) == pytest.approx(3.0)  # three unrelated items
    assert vendi_score(torch.zeros(0, 0)) == 0.0
    assert vendi_score_of_keys(["a", "a", "b", "b", None]) == pytest.approx(2.0)
    assert vendi_score_of_keys(["a", "a", "a", "b"]) == pytest.approx(math.exp(-(0.75 * math.log(0.75)
                                                                               + 0.25 * math.log(0.25))))
    assert vendi_score_of_keys([None, None]) == 0.0
    with pytest.raises(ValueError, match="square"):
        vendi_score(torch.ones(2, 3))


def test_vendi_score_of_embeddings_equals_the_cosine_kernel_score_either_way_round() -> None:
    from divrl.core import vendi_score, vendi_score_of_embeddings

    torch.manual_seed(0)
    for rows, dims in ((40, 6), (5, 30)):  # the d x d Gram, then the n x n one
        x = torch.randn(rows, dims, dtype=torch.float64)
        unit = torch.nn.functional.normalize(x, dim=1)
        assert vendi_score_of_embeddings(x) == pytest.approx(vendi_score(unit @ unit.T), rel=1e-9)
    assert vendi_score_of_embeddings(torch.zeros(3, 2)) == pytest.approx(1.0)  # zero rows: one shared item
    assert vendi_score_of_embeddings(torch.tensor([[0.0, 0.0], [1.0, 0.0]])) == pytest.approx(2.0)


def test_vendi_score_of_a_nan_similarity_is_nan_not_an_error() -> None:
    from divrl.core.metrics import vendi_score

    assert math.isnan(vendi_score(torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]])))
