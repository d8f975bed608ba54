"""The task protocol helpers shared by every task and trainer."""

import pytest

from divrl.task import completion_text, has_hook


def test_completion_text_reads_strings_and_chat_lists() -> None:
    assert completion_text("Graph: A->B") == "Graph: A->B"
    assert completion_text([{"role": "assistant", "content": "Graph: A->B"}]) == "Graph: A->B"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]) == "hi"
    assert completion_text([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]) == "y"
    assert completion_text({"content": "bare message"}) == "bare message"
    assert completion_text([{"role": "user", "content": "no"}]) == ""
    assert completion_text(None) == "" and completion_text(42) == "" and completion_text([1, "x"]) == ""


def test_has_hook() -> None:
    class Task:
        name = "t"

        def outcome_key(self, completion: str) -> str:
            return completion

    assert has_hook(Task(), "outcome_key") and not has_hook(Task(), "behavior") and not has_hook(None, "behavior")


@pytest.mark.parametrize(("style", "template", "resolved"), [("auto", True, "chat"), ("auto", False, "base"),
                                                             ("base", True, "base"), ("chat", False, "chat")])
def test_prompt_style_auto_follows_the_chat_template(style: str, template: bool, resolved: str) -> None:
    from divrl.task import resolve_prompt_style

    assert resolve_prompt_style(style, template) == resolved
