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


def _one_by_one(rows: torch.Tensor, leaders: list[torch.Tensor], threshold: float, max_leaders: int) -> list[int]:
    """The definition, row by row: join the most similar leader (first on ties) above the threshold or at the
    class bound, else found a class."""
    keys = []
    for vector in torch.nn.functional.normalize(rows, dim=1):
        if leaders:
            similarity = torch.stack(leaders) @ vector
            best = int(similarity.argmax())
            if similarity[best] >= threshold or len(leaders) >= max_leaders:
                keys.append(best)
                continue
        leaders.append(vector)
        keys.append(len(leaders) - 1)
    return keys


@pytest.mark.parametrize("max_leaders", [7, 4096])
def test_batched_assignment_equals_the_row_by_row_definition_across_calls(max_leaders: int) -> None:
    generator = torch.Generator().manual_seed(0)
    clusters, reference_leaders = LeaderClusters(threshold=0.6, max_leaders=max_leaders), []
    for _ in range(4):  # later calls meet the earlier calls' leaders (and the store grows past its first size)
        rows = torch.randn(12, 6, generator=generator)
        assert clusters.assign(rows) == _one_by_one(rows, reference_leaders, 0.6, max_leaders)
    # 17 classes without a bound (the store regrew past its first 16 rows); the bound of 7 reached otherwise
    assert len(clusters) == len(reference_leaders) == (7 if max_leaders == 7 else 17)
    assert torch.allclose(clusters.leaders, torch.stack(reference_leaders))
