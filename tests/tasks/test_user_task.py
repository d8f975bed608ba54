"""A user's own task reaches the CLI (issue 31, part 1): `task: path/to/task.py:Factory` or
`package.module:Factory` in a recipe (or --task), with task_args passed to the factory; every problem with it is
one line naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from divrl.cli import main as cli_main
from divrl.task import build_task

TASK_FILE = '''
from datasets import Dataset


def starts_with_answer(completions, answer, **_):
    return [1.0 if c.strip().startswith(a) else 0.0 for c, a in zip(completions, answer)]


class EchoTask:
    name = "echo"

    def __init__(self, word="hi"):
        self.word = word

    def reward_funcs(self):
        return [starts_with_answer]

    def outcome_key(self, completion, **row):
        return completion.strip()[:3] or None

    def train_dataset(self, split="train", style="base", seed=0, limit=None, n_exemplars=0):
        return Dataset.from_list([{"prompt": f"Say {self.word} {i}:", "answer": self.word} for i in range(8)])


class NoRewards:
    name = "broken"
'''


@pytest.fixture()
def task_file(tmp_path: Path) -> Path:
    path = tmp_path / "mytask.py"
    path.write_text(TASK_FILE)
    return path


def _recipe(tmp_path: Path, task: str, model: Path) -> Path:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("\n".join([
        f"task: {task}", "task_args: {word: hello}", "prompt_style: base", "n_exemplars: 0", "use_peft: true",
        "lora_r: 4", "lora_alpha: 8", "use_cpu: true", "bf16: false", "dtype: float32", "ips: true",
        "num_generations: 4", "per_device_train_batch_size: 4", "max_completion_length: 8", "max_steps: 1",
        "logging_steps: 1", "report_to: none", 'save_strategy: "no"', f"model_name_or_path: {model}",
        f"output_dir: {tmp_path / 'run'}"]) + "\n")
    return recipe


def test_a_task_file_trains_from_a_recipe_with_its_task_args(task_file: Path, tiny_qwen3: Path,
                                                             tmp_path: Path) -> None:
    assert cli_main(["train", str(_recipe(tmp_path, f"{task_file}:EchoTask", tiny_qwen3))]) == 0
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    assert any("rewards/starts_with_answer/mean" in entry and "ips/distinct_outcomes" in entry for entry in history)
    assert build_task(f"{task_file}:EchoTask", word="hello").word == "hello"


def test_a_task_module_on_the_path_is_found_by_its_import_path(task_file: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "my_tasks"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "echo.py").write_text(TASK_FILE)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert build_task("my_tasks.echo:EchoTask", word="yo").word == "yo"


@pytest.mark.parametrize(("spec", "problem"), [
    ("{dir}/missing.py:EchoTask", "missing.py' does not exist"),
    ("{file}:Nope", "has no class or function 'Nope'"),
    ("{file}:NoRewards", "has no reward_funcs() method"),
    ("no_such_package_xyz.tasks:Task", "cannot import 'no_such_package_xyz.tasks': ModuleNotFoundError"),
    ("voxel", "unknown task 'voxel'; choose one of: countdown, dataset, hypospace-boolean"),
])
def test_a_bad_task_is_one_line_naming_the_problem(spec: str, problem: str, task_file: Path) -> None:
    with pytest.raises(ValueError) as raised:
        build_task(spec.format(dir=task_file.parent, file=task_file))
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_a_task_file_that_fails_to_import_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import definitely_not_installed_module\n")
    assert cli_main(["train", str(_recipe(tmp_path, f"{broken}:Task", tmp_path))]) == 2
    err = capsys.readouterr().err
    assert "importing" in err and "ModuleNotFoundError" in err and "Traceback" not in err
