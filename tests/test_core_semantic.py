"""Leader clustering for semantic outcome keys: order-defined classes, persistence, bounds, state round trip."""

from __future__ import annotations

import pytest
import torch

from divrl.core import LeaderClusters, hashed_ngram_embedding


def test_paraphrases_share_a_class_and_unrelated_texts_do_not() -> None:
    texts = ["use a graph neural network to predict protein folding",
             "predict protein folding with a graph neural network",
             "train a transformer on weather data to forecast storms",
             "use a graph neural network to predict protein folding"]
    clusters = LeaderClusters(threshold=0.6)
    assert clusters.assign(hashed_ngram_embedding(texts)) == [0, 0, 1, 0]
    assert clusters.assign(hashed_ngram_embedding(["a transformer trained on weather data forecasts storms"])) == [1]


def test_a_row_joins_the_most_similar_leader_above_the_threshold() -> None:
    clusters = LeaderClusters(threshold=0.5)
    vectors = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [0.8, 0.6], [-1.0, 0.0]])
    assert clusters.assign(vectors) == [0, 1, 1, 0, 2]


def test_empty_rows_have_no_class_and_the_class_count_is_bounded() -> None:
    clusters = LeaderClusters(threshold=0.99, max_leaders=2)
    vectors = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.7, 0.7], [float("nan"), 1.0]])
    assert clusters.assign(vectors) == [0, None, 1, 0, None]  # the third class would exceed max_leaders
    assert len(clusters) == 2


def test_state_round_trip_keeps_the_classes() -> None:
    clusters = LeaderClusters(threshold=0.7)
    clusters.assign(torch.eye(3))
    restored = LeaderClusters()
    restored.load_state_dict(clusters.state_dict())
    assert restored.threshold == 0.7 and restored.assign(torch.tensor([[0.0, 0.1, 1.0]])) == [2]
    with pytest.raises(ValueError, match="missing key"):
        restored.load_state_dict({"threshold": 0.5})
    with pytest.raises(ValueError, match="dim"):
        restored.assign(torch.ones(1, 4))


@pytest.mark.parametrize(("threshold", "max_leaders"), [(1.5, 10), (0.5, 0)])
def test_bad_configuration_is_refused(threshold: float, max_leaders: int) -> None:
    with pytest.raises(ValueError):
        LeaderClusters(threshold, max_leaders)
