"""The idea-generation toy for language models: parsing, rewards and hooks."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from divrl.tasks.ideas import IdeasTask


@pytest.fixture(scope="module")
def task():
    return IdeasTask(dim=4, noise=0.0)


def test_parse_reads_the_idea_line(task):
    assert task.parse("Some prose.\nIdea: 1, -2.5, 3e0, .5\nIdea: 9 9 9 9").tolist() == [1.0, -2.5, 3.0, 0.5]
    assert task.parse(" 1 2 3 4\nrest").tolist() == [1.0, 2.0, 3.0, 4.0]  # base prompts end in "Idea:"
    assert task.parse([{"role": "assistant", "content": "Idea: 0 0 0 1"}]).tolist() == [0.0, 0.0, 0.0, 1.0]
    assert task.parse("Idea: 1 2 3") is None  # wrong count
    assert task.parse("Idea: 1 2 3 1e300") is None  # absurd magnitude


def test_reward_hooks_and_garbage(task):
    good = "Idea: 0.5 0.5 0.5 0.5"
    rewards = task.reward([None] * 3, [good, "nothing", good])
    assert rewards[1] == 0.0 and all(isinstance(r, float) for r in rewards)
    b = task.behavior(good)
    assert len(b) == task.behavior_dims and all(0.0 <= v <= 1.0 for v in b)
    assert task.outcome_key(good) == tuple(min(int(v * 10), 9) for v in b)
    assert task.embed(good) == [0.5] * 4
    assert task.behavior("nothing") is None and task.outcome_key("nothing") is None


def test_reward_is_seeded():
    completions = ["Idea: 1 1 1 1"] * 20
    assert IdeasTask(dim=4, reward_seed=3).reward([], completions) == IdeasTask(dim=4, reward_seed=3).reward(
        [], completions)


FUZZ_TASK = IdeasTask(dim=4)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_string_gets_a_number(text):
    assert isinstance(FUZZ_TASK.reward([None], [text])[0], float)


def test_dataset_styles(task):
    chat, base = task.train_dataset(style="chat"), task.train_dataset(style="base", limit=3)
    assert len(chat) == 8 and chat[0]["prompt"][0]["role"] == "user"
    assert len(base) == 3 and base[0]["prompt"].endswith("Idea:")
    with pytest.raises(ValueError, match="style"):
        task.train_dataset(style="poem")
