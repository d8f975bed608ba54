"""Task code stays with the tasks (issue 59): no generic module of divrl imports a task module, and the generic
entry points (the verbs and the task protocol, `src/divrl/*.py`) name no shipped task; they read the task table
(`divrl.tasks`) and ask a task through its hooks (`divrl.task`), so a user's task gets the same treatment. A source
scan, by the syntax tree: imports, and string constants other than docstrings (the methods' field help may still
give a task as an example of what a hook returns)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from divrl.tasks import DEFAULT_TASK, TASK_COMMANDS, TASK_EVAL_COMMANDS, TASKS

PACKAGE = Path(__file__).parents[2] / "src" / "divrl"
TASK_PACKAGE = "divrl.tasks"

# Generic modules that may name a task, each for a stated reason.
ALLOWED = {
    # The demo's content is the shipped tasks it demonstrates (the HypoSpace Boolean comparison of GRPO and IPS-GRPO,
    # the chemical LM on a PMO oracle); it is a showcase, not an entry point a user's task goes through.
    "demo.py": "demonstrates shipped tasks",
    # The doctor checks an install by training the shipped chemical LM on the task it was made for.
    "doctor.py": "checks the shipped chemical LM on its task",
    # Tiny test models shaped like the shipped ones (the tiny chemical LM uses the molecule task's SMILES tokenizer).
    "testing.py": "builds test models shaped like the shipped ones",
    # A deprecated re-export of the HypoSpace recovery callback at its old path, for one release.
    "trainers/recovery_callback.py": "deprecated re-export",
}
# The `dataset` task reads a user's own data set: its name is the generic word, which generic code says often.
GENERIC_WORD_TASKS = {"dataset"}


def task_words() -> set[str]:
    """The shipped tasks' names and family names (the part before '-': 'hypospace' of 'hypospace-voxel')."""
    names = set(TASKS) - GENERIC_WORD_TASKS
    return names | {name.split("-")[0] for name in names}


def docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the constant nodes that are docstrings (of the module, a class or a function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def task_mentions(source: str, imports_only: bool = False) -> list[str]:
    """Each place in `source` that names a shipped task, in line order: an import of a task module, a string naming a
    task module ('divrl.tasks.x') and, unless `imports_only`, a string constant (not a docstring) holding a task's
    name or family name as a word."""
    tree = ast.parse(source)
    # A word inside a path (recipes are filed by task: recipes/embedded-cpu/hypospace-boolean/ips.yaml) names a
    # recipe, not the task.
    words = re.compile(r"(?<!/)\b(" + "|".join(map(re.escape, sorted(task_words()))) + r")\b", re.IGNORECASE)
    module = re.compile(re.escape(TASK_PACKAGE) + r"\.\w")
    skip = docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"line {node.lineno}: import {a.name}") for a in node.names
                      if a.name.startswith(TASK_PACKAGE)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(TASK_PACKAGE + "."):
                found.append((node.lineno, f"line {node.lineno}: from {node.module} import ..."))
            elif node.module == TASK_PACKAGE:  # the table, not a task module
                found += [(node.lineno, f"line {node.lineno}: from {TASK_PACKAGE} import {a.name}") for a in node.names
                          if a.name not in ("TASKS", "DEFAULT_TASK", "TASK_COMMANDS", "TASK_EVAL_COMMANDS")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            hit = module.search(node.value) or (None if imports_only else words.search(node.value))
            if hit:
                found.append((node.lineno, f"line {node.lineno}: {hit.group(0)!r} in {node.value[:60]!r}"))
    return [text for _, text in sorted(found)]


def generic_modules() -> list[Path]:
    """Every module of the package outside `divrl/tasks/`, less ALLOWED."""
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if not path.relative_to(PACKAGE).as_posix().startswith("tasks/")
            and path.relative_to(PACKAGE).as_posix() not in ALLOWED]


def entry_points() -> list[Path]:
    """The generic modules at the package's top level: the verbs, the command line and the task protocol."""
    return [path for path in generic_modules() if path.parent == PACKAGE]


@pytest.mark.parametrize("path", generic_modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_generic_module_imports_a_task_module(path: Path) -> None:
    assert task_mentions(path.read_text(), imports_only=True) == []


@pytest.mark.parametrize("path", entry_points(), ids=lambda p: p.name)
def test_no_entry_point_names_a_task(path: Path) -> None:
    assert task_mentions(path.read_text()) == []


def test_the_scan_finds_each_way_of_naming_a_task() -> None:
    """The scanner is not blind: each way generic code used to name a task is found; docstrings and recipe paths
    are not."""
    source = '''"""A docstring may say hypospace-voxel and molecules."""
from divrl.tasks.hypospace.recovery_callback import RecoveryEvalCallback
import divrl.tasks.molecules
from divrl.tasks import hypospace
COMMANDS = {"recovery": "divrl.tasks.hypospace.recovery_cli"}
task: str = "hypospace-voxel"
if name.startswith("hypospace"):
    raise ValueError(f"recovery_eval measures HypoSpace recovery; task {name!r}")
metric = "molecules/validity"
example = "divrl train recipes/embedded-cpu/hypospace-boolean/ips.yaml"
'''
    found = task_mentions(source)
    assert [line.split(":")[0] for line in found] == [f"line {n}" for n in (2, 3, 4, 5, 6, 7, 8, 9)], found
    imports = task_mentions(source, imports_only=True)
    assert [line.split(":")[0] for line in imports] == [f"line {n}" for n in (2, 3, 4, 5)], imports


def test_the_table_names_importable_modules_and_a_registered_default() -> None:
    """The table the generic verbs read holds what they need: the default task is registered, and every task,
    subcommand and evaluator it names is a module spec of the task package (imported only when used)."""
    assert DEFAULT_TASK in TASKS
    for spec in [*TASKS.values(), *TASK_COMMANDS.values(), *TASK_EVAL_COMMANDS.values()]:
        assert spec.startswith(TASK_PACKAGE + "."), spec
        module = spec.partition(":")[0]
        assert (PACKAGE.parent / (module.replace(".", "/") + ".py")).is_file() or \
            (PACKAGE.parent / module.replace(".", "/") / "__init__.py").is_file(), module


def test_the_cli_takes_the_tasks_subcommands_from_the_table() -> None:
    from divrl.cli import COMMANDS, EVAL_COMMANDS

    assert TASK_COMMANDS.items() <= COMMANDS.items()
    assert TASK_EVAL_COMMANDS.items() <= EVAL_COMMANDS.items()


def test_a_user_task_with_the_recovery_hook_gets_the_callback(tmp_path: Path) -> None:
    """recovery_eval asks the task: a task of one's own with a `recovery_eval_callback` hook passes the check and its
    callback is attached with the recipe's settings; one without the hook is refused, naming the hook."""
    from types import SimpleNamespace

    from divrl.train import add_recovery_eval, check_recovery_eval

    class OwnTask:
        name = "own"

        def reward_funcs(self) -> list:
            return []

        def recovery_eval_callback(self, trainer: object, held_out: object, **settings: object) -> tuple:
            return ("callback", held_out, settings)

    settings = SimpleNamespace(recovery_eval=True, task="own.py:OwnTask", recovery_eval_instances=3,
                               recovery_eval_samples=5, recovery_eval_max_new_tokens=7)
    check_recovery_eval(OwnTask(), settings)
    attached = []
    add_recovery_eval(SimpleNamespace(add_callback=attached.append), OwnTask(), settings, "held-out rows")
    assert attached == [("callback", "held-out rows", {"instances": 3, "samples": 5, "max_new_tokens": 7})]

    class NoHook:
        name = "plain"

        def reward_funcs(self) -> list:
            return []

    with pytest.raises(ValueError, match="task 'own.py:OwnTask' has none.*recovery_eval false"):
        check_recovery_eval(NoHook(), settings)
    check_recovery_eval(NoHook(), SimpleNamespace(**{**vars(settings), "recovery_eval": False}))
