"""The generic dataset task (issue 31): prompts and reference answers from a local file, final-answer matching
without evaluating anything, the normalised answer as outcome, and a training step from a JSONL file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divrl.cli import main as cli_main
from divrl.task import build_task

ROWS = [{"question": "What is 2 + 3?", "answer": "Adding gives 5.\n#### 5"},
        {"question": "How many legs have 3 cats?", "answer": "#### 12"},
        {"question": "What is 1000 + 234?", "answer": "1,234"}]


@pytest.fixture()
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


def _task(path: Path, **kwargs):
    return build_task("dataset", path=str(path), prompt_column="question", **kwargs)


@pytest.mark.parametrize(("completion", "answer"), [
    ("so the total is\n#### 5", "5"), ("We get \\boxed{12}.", "12"), ("it is 1,234.", "1234"),
    ("#### $1,234$.", "1234"), ("no number here", None), ("", None), ("#### ", None),
    ("9" * 10_000 + "\n#### 7", "7"), ("#" * 5000, None), ("\\boxed{" * 3000, None),
])
def test_the_final_answer_is_read_without_evaluating_anything(completion: str, answer: str | None,
                                                               jsonl: Path) -> None:
    assert _task(jsonl).final_answer(completion) == answer


def test_rewards_match_exactly_or_numerically_and_outcomes_are_the_answers(jsonl: Path) -> None:
    task = _task(jsonl)
    references = task.train_dataset(style="base")["reference"]
    assert references == ["5", "12", "1234"]
    completions = ["#### 5.0", "#### twelve", "The answer: 1234"]
    assert task.answer_match(completions, references) == [1.0, 0.0, 1.0]
    assert task.answer_match(["#### 5.001"], ["5"]) == [0.0]
    assert _task(jsonl, tolerance=1e-3).answer_match(["#### 5.001"], ["5"]) == [1.0]
    assert task.outcome_key("so #### 5") == "5" and task.outcome_key("nothing") is None


def test_every_local_format_loads_and_problems_name_the_file(jsonl: Path, tmp_path: Path) -> None:
    from datasets import Dataset

    data = Dataset.from_list(ROWS)
    data.to_csv(tmp_path / "data.csv")
    data.to_parquet(tmp_path / "data.parquet")
    data.save_to_disk(tmp_path / "saved")
    for path in (jsonl, tmp_path / "data.csv", tmp_path / "data.parquet", tmp_path / "saved"):
        assert _task(path).train_dataset(style="chat")["prompt"][0] == [{"role": "user", "content": "What is 2 + 3?"}]
    with pytest.raises(ValueError, match="has no column 'prompt'; its columns: question, answer"):
        build_task("dataset", path=str(jsonl))
    with pytest.raises(ValueError, match="does not exist"):
        _task(tmp_path / "nope.jsonl")
    held_out = _task(jsonl, test_fraction=0.34)
    assert len(held_out.train_dataset(split="test")) == 1 and len(held_out.train_dataset(split="train")) == 2


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize(("bad_row", "role", "column"), [
    ({"question": "What is 4 + 4?", "answer": None}, "answer", "answer"),
    ({"question": "What is 4 + 4?"}, "answer", "answer"),
    ({"question": "What is 4 + 4?", "answer": "  "}, "answer", "answer"),
    ({"question": None, "answer": "#### 8"}, "prompt", "question"),
    ({"answer": "#### 8"}, "prompt", "question"),
])
def test_a_row_without_a_prompt_or_answer_is_refused_naming_file_row_and_column(
        bad_row: dict, role: str, column: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "holes.jsonl", [ROWS[0], bad_row, ROWS[1]])
    with pytest.raises(ValueError, match=rf"dataset '{path}': row 2 has no {role} \(column '{column}' is "
                                         r"missing, null or blank in 1 of 3 rows\)"):
        _task(path)


def test_an_empty_csv_cell_is_a_missing_answer(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("question,answer\nWhat is 2 + 3?,5\nWhat is 4 + 4?,\n")
    with pytest.raises(ValueError, match="row 2 has no answer"):
        _task(path)


def test_hash_none_cannot_be_farmed_from_a_row_without_an_answer(tmp_path: Path) -> None:
    """Such a row used to train with the reference "none", which `#### None` matched for a reward of 1.0."""
    path = _write(tmp_path / "data.jsonl", [*ROWS, {"question": "What is 4 + 4?", "answer": None}])
    with pytest.raises(ValueError, match="has no answer"):
        _task(path)
    task = _task(_write(tmp_path / "complete.jsonl", ROWS))
    references = task.train_dataset(style="base")["reference"]
    assert task.answer_match(["#### None"] * len(references), references) == [0.0] * len(references)


def test_a_null_prompt_never_becomes_the_text_none(tmp_path: Path) -> None:
    path = _write(tmp_path / "data.jsonl", [*ROWS, {"question": None, "answer": "#### 8"}])
    with pytest.raises(ValueError, match="row 4 has no prompt"):
        _task(path).train_dataset(style="base")


def test_a_column_of_mixed_types_names_the_file_the_column_and_the_row(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "mixed.jsonl", [{"question": "What is 2 + 3?", "answer": 5},
                                             {"question": "What is 3 + 3?", "answer": 6},
                                             {"question": "What is 4 + 4?", "answer": "eight"}])
    with pytest.raises(ValueError, match=rf"dataset '{path}': column 'answer' mixes value types: row 3 holds "
                                         r"'eight' \(str\)"):
        _task(path)
    nested = _write(tmp_path / "nested.jsonl", [{**ROWS[0], "tags": [1]}, {**ROWS[1], "tags": ["a"]}])
    with pytest.raises(ValueError, match=rf"dataset '{nested}': column 'tags' mixes value types: row 2"):
        _task(nested)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"task: dataset\ntask_args: {{path: {path}, prompt_column: question}}\nuse_cpu: true\n"
                      f"bf16: false\noutput_dir: {tmp_path / 'run'}\n")
    assert cli_main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line.lower()]  # not the loader's progress bar
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("divrl train: error: dataset") and f"{path}': column 'answer'" in lines[0]
    assert "settings" not in lines[0]


def test_the_dataset_task_trains_a_step_from_a_jsonl_file(jsonl: Path, tiny_qwen3: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("\n".join([
        "task: dataset", f"task_args: {{path: {jsonl}, prompt_column: question}}", "prompt_style: base",
        "use_peft: true", "lora_r: 4", "lora_alpha: 8", "use_cpu: true", "bf16: false", "dtype: float32",
        "ips: true", "count_bonus_coef: 0.5", "num_generations: 3", "per_device_train_batch_size: 3",
        "max_completion_length: 8", "max_steps: 1", "logging_steps: 1", "report_to: none", 'save_strategy: "no"',
        f"model_name_or_path: {tiny_qwen3}", f"output_dir: {out}"]) + "\n")
    assert cli_main(["train", str(recipe)]) == 0
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("rewards/answer_match/mean" in entry and "count/distinct_outcomes" in entry for entry in history)
