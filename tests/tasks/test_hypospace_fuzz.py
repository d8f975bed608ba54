"""Parsers and rewards on untrusted input: random text and bytes, huge and deeply nested strings, Unicode.

Every parser must return a hypothesis of its space or None, never raise and never recurse unboundedly;
the reward functions must return a number for anything.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from divrl.tasks.hypospace import BooleanTask, CausalTask, HypoSpaceTask, VoxelTask

TASKS: list[HypoSpaceTask] = [
    CausalTask(nodes=4, max_edges=6),
    VoxelTask(),
    BooleanTask("full", 2),
    BooleanTask("basic", 2),
]
SPACES = {t.name + str(t.params): set(t.hypothesis_space()) for t in TASKS if hasattr(t, "hypothesis_space")}


def _check(task: HypoSpaceTask, text: str) -> None:
    key = task.parse(text)
    assert key is None or isinstance(key, str)
    if key is not None:
        assert key in SPACES.get(task.name + str(task.params), {key})
        assert task.parse(task.render_answer(key)) == key
        assert all(0.0 <= d <= 1.0 for d in task.descriptor(key))
    (reward,) = task.reward_funcs()
    assert reward(["p"], [text], hypotheses=[["A->B"]]) in ([0.0], [1.0])


# Alphabet biased toward the characters the grammars care about, so random strings reach deep parser states.
_GRAMMAR_CHARS = "ABCDxy01()[],;:->→=|&!~¬∧∨ \n\tLayerGraphExpression NOTANDORNOR\\$`*"


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
@settings(max_examples=150, deadline=None)
@given(text=st.one_of(st.text(), st.text(alphabet=_GRAMMAR_CHARS, max_size=200)))
def test_random_text_never_raises(task: HypoSpaceTask, text: str) -> None:
    _check(task, text)


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_never_raise(task: HypoSpaceTask, data: bytes) -> None:
    _check(task, data.decode("utf-8", errors="replace"))
    _check(task, data.decode("latin-1"))


def _adversarial() -> list[str]:
    rng = random.Random(0)
    noise = "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(100_000))
    return [
        noise,
        "(" * 10_000 + "x" + ")" * 10_000,
        "Expression: " + "(" * 10_000 + "x" + ")" * 10_000,
        "Expression: " + "NOT " * 10_000 + "x",
        "Expression: " + " AND ".join(["x"] * 20_000),
        "Expression: " + "AND(" * 5_000 + "x" + ", y)" * 5_000,
        "Graph: " + "A->" * 30_000 + "B",
        "Graph: " + ", ".join(["A->B"] * 20_000),
        "Graph:" + " " * 100_000 + "A->B x",
        "Layer 1:\n" * 10_000,
        "Layer 1:\n" + "1 0 0\n" * 50_000,
        "layer 1" + " " * 100_000 + ":\n1 0 0\n0 0 0\n0 0 0",
        "\n".join(f"Layer {k}:\n1 0 0\n0 0 0\n0 0 0" for k in range(1, 5000)),
        "```" * 30_000,
        "\x00\ud7ff\ufffd\U0010ffff" * 1000,
        "Graph: Ａ->Ｂ",  # full-width letters
        "Expression: x\u200b AND y",  # zero-width space
    ]


_ADVERSARIAL = _adversarial()


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
@pytest.mark.parametrize("index", range(len(_ADVERSARIAL)))
def test_adversarial_inputs_are_unreadable_or_in_space(task: HypoSpaceTask, index: int) -> None:
    _check(task, _ADVERSARIAL[index])


def test_deep_nesting_is_rejected_not_recursed() -> None:
    task = BooleanTask("full", 2)
    assert task.parse("(" * 10_000 + "x" + ")" * 10_000) is None
    assert task.parse("NOT " * 10_000 + "x") is None
    assert task.parse("((((x AND y))))") == "AND(x,y)"
