"""MAP-Elites archive, novelty memory, text embedding and the entropy controller."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from divrl.core import (
    AdaptiveEntropyCoefficient,
    AddStatus,
    GridArchive,
    NoveltyMemory,
    archive_bonus,
    hashed_ngram_embedding,
)


def test_archive_statuses_and_stats():
    archive = GridArchive([2, 2], [(0, 1), (0, 1)])
    statuses = archive.add([[0.1, 0.1], [0.2, 0.2], [0.9, 0.9], None, [0.6, 0.1]], [1.0, 2.0, 3.0, 9.0, None])
    # Two items land in the same new cell: only the better one counts, and it counts NEW once.
    assert statuses == [AddStatus.NOT_ADDED, AddStatus.NEW, AddStatus.NEW, AddStatus.NOT_ADDED, AddStatus.NOT_ADDED]
    assert archive.add([[0.1, 0.1], [0.0, 0.0]], [1.5, 2.5]) == [AddStatus.NOT_ADDED, AddStatus.IMPROVED]
    stats = archive.stats()
    assert stats.num_elites == 2 and stats.coverage == 0.5
    assert stats.qd_score == pytest.approx(5.5) and stats.best == pytest.approx(3.0)


def test_archive_clips_out_of_range_and_checks_dims():
    archive = GridArchive([4], [(0, 1)])
    assert archive.cell_index([[-5.0], [0.3], [7.0]]).tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match="dimension 2"):
        archive.add([[0.1, 0.2]], [1.0])
    with pytest.raises(ValueError, match="low < high"):
        GridArchive([2], [(1, 1)])


def test_archive_bonus_values():
    bonus = archive_bonus([AddStatus.NEW, AddStatus.IMPROVED, AddStatus.NOT_ADDED], 0.5, 0.3)
    assert torch.allclose(bonus, torch.tensor([0.5, 0.3, 0.0]))


def test_archive_state_round_trip_is_json():
    archive = GridArchive([3, 3], [(0, 1), (-1, 1)])
    archive.add([[0.5, 0.0], [0.9, 0.9]], [1.0, 2.0])
    state = json.loads(json.dumps(archive.state_dict()))
    restored = GridArchive([3, 3], [(0, 1), (-1, 1)])
    restored.load_state_dict(state)
    assert restored.elites() == archive.elites() and restored.stats() == archive.stats()
    with pytest.raises(ValueError, match="dims"):
        GridArchive([2, 2], [(0, 1), (-1, 1)]).load_state_dict(state)


def test_archive_load_state_names_missing_keys_and_bad_elites():
    archive = GridArchive([3, 3], [(0, 1), (-1, 1)])
    with pytest.raises(ValueError, match="GridArchive state is missing key.s. dims, ranges, elites"):
        archive.load_state_dict({})
    state = archive.state_dict()
    del state["elites"]
    with pytest.raises(ValueError, match="missing key.s. elites"):
        archive.load_state_dict(state)
    with pytest.raises(ValueError, match=r"cell in \[0, 9\)"):
        archive.load_state_dict({**archive.state_dict(), "elites": [[9, [0.5, 0.0], 1.0]]})


batch_st = st.lists(
    st.tuples(st.floats(-0.5, 1.5), st.floats(-0.5, 1.5), st.floats(-10, 10)), min_size=1, max_size=20
)


@settings(max_examples=60)
@given(st.lists(batch_st, min_size=1, max_size=5))
def test_archive_never_loses_a_better_elite(batches):
    archive = GridArchive([3, 3], [(0, 1), (0, 1)])
    best: dict[int, float] = {}
    for batch in batches:
        descriptors, objectives = [b[:2] for b in batch], [b[2] for b in batch]
        archive.add(descriptors, objectives)
        for cell, value in zip(archive.cell_index(descriptors).tolist(), objectives):
            best[cell] = max(best.get(cell, value), value)
        elites = {cell: objective for cell, _, objective in archive.elites()}
        assert elites == pytest.approx(best)


def test_novelty_memory_scores_and_rolls():
    memory = NoveltyMemory(capacity=2, k=1, gamma=2.0)
    assert torch.equal(memory.score(torch.zeros(3, 2)), torch.zeros(3))
    memory.add(torch.tensor([[0.0, 0.0], [10.0, 0.0]]))
    assert torch.allclose(memory.score(torch.tensor([[1.0, 0.0]])), torch.tensor([2.0]))
    memory.add(torch.tensor([[0.0, 3.0]]))  # evicts [0, 0]
    assert len(memory) == 2
    assert torch.allclose(memory.score(torch.tensor([[0.0, 0.0]])), torch.tensor([6.0]))


def test_novelty_mean_of_k_nearest_and_state_round_trip():
    memory = NoveltyMemory(capacity=10, k=2, gamma=1.0)
    memory.add(torch.tensor([[1.0], [3.0], [10.0]]))
    assert torch.allclose(memory.score(torch.tensor([[0.0]])), torch.tensor([2.0]))
    restored = NoveltyMemory()
    restored.load_state_dict(memory.state_dict())
    assert torch.equal(restored.score(torch.tensor([[0.0], [5.0]])), memory.score(torch.tensor([[0.0], [5.0]])))
    with pytest.raises(ValueError, match="dim"):
        memory.score(torch.zeros(1, 3))


def test_novelty_load_state_is_validated():
    memory = NoveltyMemory(capacity=4, k=2, gamma=1.0)
    memory.add(torch.ones(3, 2))
    state = memory.state_dict()
    restored = NoveltyMemory()
    with pytest.raises(ValueError, match="novelty capacity must be >= 1, got 0"):
        restored.load_state_dict({**state, "capacity": 0, "memory": None})
    with pytest.raises(ValueError, match=r"must be \(n <= capacity=2, dim\), got shape \(3, 2\)"):
        restored.load_state_dict({**state, "capacity": 2})
    with pytest.raises(ValueError, match="NoveltyMemory state is missing key.s. memory"):
        restored.load_state_dict({"capacity": 4, "k": 2, "gamma": 1.0})
    assert len(restored) == 0 and restored.capacity == 512  # a rejected state changes nothing


@settings(max_examples=50)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=5))
def test_hashed_embedding_is_deterministic_and_normalised(texts):
    a, b = hashed_ngram_embedding(texts), hashed_ngram_embedding(list(texts))
    assert torch.equal(a, b)
    norms = a.norm(dim=1)
    assert all(n == pytest.approx(1.0, abs=1e-5) or n == 0.0 for n in norms.tolist())


def test_hashed_embedding_separates_texts_and_handles_garbage():
    emb = hashed_ngram_embedding(["Layer 1: 1 0 0", "Layer 1: 1 0 0", "completely different", "\udcff" * 10**5])
    assert torch.equal(emb[0], emb[1]) and not torch.equal(emb[0], emb[2])
    assert torch.isfinite(emb).all()


def test_entropy_controller_dual_descent():
    controller = AdaptiveEntropyCoefficient(target=1.0, lr=0.5)
    assert controller.update(0.0) == pytest.approx(0.5)  # below target: alpha grows
    assert controller.update(0.5) == pytest.approx(0.75)
    assert controller.update(3.0) == 0.0  # far above target: clipped at 0
    capped = AdaptiveEntropyCoefficient(target=1.0, lr=1.0, max_alpha=0.2)
    assert capped.update(0.0) == pytest.approx(0.2)
    restored = AdaptiveEntropyCoefficient(target=0.0, lr=1.0)
    restored.load_state_dict(controller.state_dict())
    assert restored.state_dict() == controller.state_dict()
    with pytest.raises(ValueError, match="lr"):
        AdaptiveEntropyCoefficient(target=1.0, lr=0.0)


@pytest.mark.parametrize("entropy", [float("nan"), float("inf"), float("-inf")])
def test_entropy_controller_rejects_non_finite_entropy(entropy):
    controller = AdaptiveEntropyCoefficient(target=1.0, lr=0.5, init_alpha=0.3)
    with pytest.raises(ValueError, match="measured entropy must be finite"):
        controller.update(entropy)
    assert controller.alpha == 0.3  # not silently reset to 0
    with pytest.raises(ValueError, match="lr must be finite and > 0, got nan"):
        AdaptiveEntropyCoefficient(target=1.0, lr=float("nan"))
    with pytest.raises(ValueError, match="missing key.s. alpha"):
        controller.load_state_dict({"target": 1.0, "lr": 0.5, "max_alpha": None})


def test_entropy_controller_auto_target_measures_the_first_steps_and_holds_them():
    controller = AdaptiveEntropyCoefficient(target=None, lr=0.5, auto_scale=2.0, auto_steps=2)
    assert controller.update(0.05) == 0.0 and controller.target is None  # measuring: alpha does not move
    half = AdaptiveEntropyCoefficient(target=None, lr=0.5, auto_scale=2.0, auto_steps=2)
    half.load_state_dict(controller.state_dict())  # a checkpoint in the middle of the measurement resumes it
    for c in (controller, half):
        assert c.update(0.15) == 0.0 and c.target == pytest.approx(2.0 * 0.1)  # 2 x mean(0.05, 0.15)
        assert c.update(0.1) == pytest.approx(0.5 * 0.1)  # then dual descent toward 0.2
    assert half.state_dict() == controller.state_dict() and controller.state_dict()["auto"]["measured"] == 2
    with pytest.raises(ValueError, match="auto_steps"):
        AdaptiveEntropyCoefficient(target=None, lr=0.5, auto_steps=0)


def test_entropy_controller_counts_steps_far_below_target():
    controller = AdaptiveEntropyCoefficient(target=1.0, lr=0.1)
    for _ in range(3):
        controller.update(0.4)  # at most half the target: far below
    assert controller.far_below_steps == 3 and controller.alpha == pytest.approx(3 * 0.06)
    controller.update(0.6)  # below target (alpha rises) but not far below: the count restarts
    assert controller.far_below_steps == 0
    assert set(controller.state_dict()) == {"target", "lr", "max_alpha", "alpha"}  # explicit target: state unchanged
