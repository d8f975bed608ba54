"""Countdown (issue 31's worked example): instances with several solutions, an exact verifier that evaluates nothing
as code, canonical expressions as outcomes, and a training step from its recipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from divrl.cli import main as cli_main
from divrl.task import build_task
from divrl.tasks.countdown import CountdownTask, canonical, parse_expression

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def task() -> CountdownTask:
    return build_task("countdown", instances=20)


def test_every_instance_has_the_solutions_it_claims(task: CountdownTask) -> None:
    from fractions import Fraction

    from divrl.tasks.countdown import solutions

    for instance in task.instances:
        forms = solutions(tuple(instance["numbers"]))[Fraction(instance["target"])]
        assert len(forms) == instance["n_solutions"] >= 2
        for form in forms:  # each canonical form is itself a correct answer with that form
            assert task.check(f"Answer: {form}", instance["numbers"], instance["target"]) == form


@pytest.mark.parametrize(("answer", "correct"), [
    ("Answer: 13 * 14 / 2", True), ("13*14/2 = 91", False), ("Answer: 14 * 13 / 2", True), ("(14 × 13) ÷ 2", True),
    ("Answer: 13 * 14 / 2 + 0", False), ("Answer: 13 * 13 / 2", False), ("Answer: 13 * 14", False),
    ("Answer: 91", False), ("Answer: 13 * 14 / (2 - 2)", False), ("Answer: import os", False),
    ("Answer: __import__('os').system('x')", False), ("", False), ("Answer: " + "(" * 60 + "2" + ")" * 60, False),
])
def test_answers_are_checked_exactly(answer: str, correct: bool) -> None:
    task = CountdownTask(instances=1)
    assert (task.check(answer, [2, 13, 14], 91) is not None) == correct


def test_commuted_answers_are_one_outcome_other_routes_another() -> None:
    task = CountdownTask(instances=1)
    same = {task.check(a, [2, 3, 5], 16) for a in ("(3 + 5) * 2", "2 * (5 + 3)", "(5+3)*2")}
    assert len(same) == 1 and None not in same
    assert task.check("3 * 2 + 5 * 2", [2, 3, 5], 16) is None  # 2 used twice
    assert canonical(parse_expression("2 * 3 + 5 * 2")) != canonical(parse_expression("(3 + 5) * 2"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_string_scores_without_raising(text: str) -> None:
    task = CountdownTask(instances=1)
    assert task.correct([text, "Answer: " + text], [[2, 13, 14]] * 2, [91, 91]) in ([0.0, 0.0], [1.0, 0.0],
                                                                                    [0.0, 1.0], [1.0, 1.0])


@pytest.mark.parametrize(("answer", "numbers", "target", "descriptor"), [
    ("Answer: (3 + 5) * 2", [2, 3, 5], 16, (0.5, 0.0)), ("Answer: 13 * 14 / 2", [2, 13, 14], 91, (1.0, 0.5)),
    ("Answer: 14 - 2 + 13", [2, 13, 14], 25, (0.0, 0.5)), ("Answer: 13 * 14", [2, 13, 14], 91, None),
    ("Answer: banana", [2, 13, 14], 91, None),
])
def test_behavior_is_the_operator_mix_of_a_correct_answer(answer, numbers, target, descriptor) -> None:
    assert CountdownTask(instances=1).behavior(answer, numbers=numbers, target=target) == descriptor


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_behavior_of_any_string_is_none_or_in_the_unit_square(text: str) -> None:
    descriptor = CountdownTask(instances=1).behavior("Answer: " + text, numbers=[2, 13, 14], target=91)
    assert descriptor is None or (len(descriptor) == 2 and all(0 <= v <= 1 for v in descriptor))


def test_countdown_recipe_dry_runs_and_trains_a_step(tiny_qwen3: Path, tmp_path: Path) -> None:
    recipe = ROOT / "recipes" / "embedded-cpu" / "countdown" / "ips.yaml"
    small = ["--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "12",
             "--task_arg", "instances=20"]
    assert cli_main(["train", str(recipe), "--dry_run", "true", "--output_dir", str(tmp_path / "dry"), *small]) == 0
    out = tmp_path / "run"
    assert cli_main(["train", str(recipe), "--model_name_or_path", str(tiny_qwen3), "--max_steps", "1",
                     "--output_dir", str(out), "--logging_steps", "1", *small]) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("rewards/correct/mean" in entry and "ips/distinct_outcomes" in entry for entry in history)


def test_eval_task_counts_validity_and_distinct_correct_answers() -> None:
    from fractions import Fraction

    from divrl.task_eval import evaluate_task
    from divrl.tasks.countdown import solutions

    task = build_task("countdown", instances=6)
    dataset = task.train_dataset(split="test", style="chat")
    forms = [sorted(solutions(tuple(n))[Fraction(t)]) for n, t in zip(dataset["numbers"], dataset["target"])]

    def sampler(prompts, n):  # two solutions, one of them twice, and a wrong answer, for every prompt
        return [[f"Answer: {f[0]}", f"Answer: {f[1]}", f"Answer: {f[0]}", "Answer: 1 + 1"] for f in forms]

    result = evaluate_task(task, dataset, sampler, 4)
    assert result["validity"] == 0.75 and result["distinct_correct_per_prompt"] == 2.0
    assert result["solved_prompts"] == 1.0 and len(result["per_prompt"]) == len(dataset) == 3


def test_eval_task_runs_from_the_command_line(tiny_qwen3: Path, tmp_path: Path) -> None:
    assert cli_main(["eval", "task", "--task", "countdown", "--task-arg", "instances=6", "--model", str(tiny_qwen3),
                     "--samples", "2", "--max-new-tokens", "6", "--no-progress", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "task_eval.json").read_text())
    assert result["prompts"] == 3 and result["samples"] == 2 and 0.0 <= result["validity"] <= 1.0
    assert all(len(row["completions"]) == 2 for row in result["per_prompt"])


def test_base_prompts_open_with_solved_train_instances() -> None:
    task = CountdownTask(instances=40)
    test_rows = task.train_dataset("test", "base", seed=3, n_exemplars=3)
    train_rows = task.train_dataset("train", "base", seed=3, n_exemplars=3)
    train_questions = {task.prompt_text(r["numbers"], r["target"]) for r in train_rows}
    for row in [*test_rows, *train_rows]:
        *shots, question = row["prompt"].split("\n\n")
        assert len(shots) == 3 and question == f"{task.prompt_text(row['numbers'], row['target'])}\nAnswer:"
        for shot in shots:
            text, answer = shot.split("\nAnswer: ")
            assert text in train_questions and text != question.split("\n")[0]  # train instances, never itself
            numbers = [int(n) for n in text.split("numbers ")[1].split(", each")[0].split(", ")]
            target = int(text.split("equals ")[1].split(".")[0])
            assert task.correct([answer], [numbers], [target]) == [1.0]  # a true solution, in the model's format
    assert "\n\n" not in task.train_dataset("test", "base", seed=3, n_exemplars=0)[0]["prompt"]
    with pytest.raises(ValueError, match="n_exemplars must be in"):
        task.train_dataset("test", "base", n_exemplars=20)


def test_instances_are_distinct_so_no_test_instance_repeats_a_train_one() -> None:
    task = CountdownTask(max_number=8, instances=100)  # 3 numbers up to 8: repeats were common before
    assert len({(tuple(i["numbers"]), i["target"]) for i in task.instances}) == 100
    with pytest.raises(ValueError, match="only 136 distinct instances"):
        CountdownTask(max_number=8, instances=200)
