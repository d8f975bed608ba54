"""Cross-step outcome-count bonus: c / sqrt(1 + n(x, o)) with n counted over training, this batch included."""

from __future__ import annotations

import io
import math

import pytest
import torch

from divrl.core import OutcomeCounts


def test_bonus_counts_this_batch_and_earlier_ones_per_prompt() -> None:
    counts = OutcomeCounts(coef=0.5)
    first = counts.bonus(["p", "p", "p", "q"], ["a", "a", "b", "a"])
    assert first.tolist() == pytest.approx([0.5 / math.sqrt(3), 0.5 / math.sqrt(3), 0.5 / math.sqrt(2),
                                            0.5 / math.sqrt(2)])  # prompt q has its own count of "a"
    second = counts.bonus(["p", "q"], ["b", "c"])
    assert second.tolist() == pytest.approx([0.5 / math.sqrt(3), 0.5 / math.sqrt(2)])  # b seen once before
    assert counts.distinct() == 4  # (p, a), (p, b), (q, a), (q, c)


def test_invalid_outcomes_get_nothing_and_are_not_counted() -> None:
    counts = OutcomeCounts(coef=1.0)
    assert counts.bonus(["p", "p"], [None, "a"]).tolist() == pytest.approx([0.0, 1 / math.sqrt(2)])
    assert counts.bonus(["p"], ["a"]).tolist() == pytest.approx([1 / math.sqrt(3)])
    assert counts.distinct() == 1


def test_global_scope_counts_an_outcome_over_every_prompt() -> None:
    per_prompt, overall = OutcomeCounts(1.0, "prompt"), OutcomeCounts(1.0, "global")
    contexts, keys = ["p", "q", "r"], ["a", "a", "a"]  # one answer written for every observation
    assert per_prompt.bonus(contexts, keys).tolist() == pytest.approx([1 / math.sqrt(2)] * 3)
    assert overall.bonus(contexts, keys).tolist() == pytest.approx([0.5] * 3)


def test_bonus_does_not_depend_on_item_order() -> None:
    keys = ["a", "b", "a", None, "c", "a"]
    forward = OutcomeCounts(0.3).bonus(["p"] * 6, keys)
    backward = OutcomeCounts(0.3).bonus(["p"] * 6, keys[::-1])
    assert forward.tolist() == pytest.approx(backward.flip(0).tolist())


def test_state_round_trips_through_torch_save_with_weights_only() -> None:
    counts = OutcomeCounts(0.5, "global")
    counts.bonus(["p", "q", "q"], ["a", ("x", 1), ("x", 1)])
    buffer = io.BytesIO()
    torch.save(counts.state_dict(), buffer)
    buffer.seek(0)
    restored = OutcomeCounts(0.0)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert (restored.coef, restored.scope, restored.counts) == (counts.coef, counts.scope, counts.counts)
    assert restored.bonus(["r"], [("x", 1)]).tolist() == counts.bonus(["r"], [("x", 1)]).tolist()


def test_bad_input_names_the_problem() -> None:
    with pytest.raises(ValueError, match="coefficient must be a finite number >= 0"):
        OutcomeCounts(-1.0)
    with pytest.raises(ValueError, match="scope must be one of 'prompt', 'global'"):
        OutcomeCounts(1.0, "batch")
    with pytest.raises(ValueError, match="2 contexts but 1 outcome keys"):
        OutcomeCounts(1.0).bonus(["p", "q"], ["a"])
    with pytest.raises(ValueError, match="missing key"):
        OutcomeCounts(1.0).load_state_dict({"coef": 1.0})
    with pytest.raises(ValueError, match=r"\[context, outcome key, count >= 1\]"):
        OutcomeCounts(1.0).load_state_dict({"coef": 1.0, "scope": "prompt", "counts": [["p", "a", 0]]})


def test_a_boolean_count_is_refused_on_load() -> None:
    counts = OutcomeCounts(0.5, "prompt")
    with pytest.raises(ValueError, match="count >= 1"):
        counts.load_state_dict({"coef": 0.5, "scope": "prompt", "counts": [["p", "o", True]]})
