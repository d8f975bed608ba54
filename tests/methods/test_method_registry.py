"""The method registry (issue 30): what every method declares, and the docs' "Add a method" example: a method
written outside divrl, in one file, that trains without any change to divrl."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from docs_examples import run_block, runnable_block
from trainer_helpers import PROMPTS, ToyTask, base_settings, lora_config, prompt_dataset


def test_every_method_declares_fields_switch_card_and_preset_consistently() -> None:
    from divrl import DivRLConfig
    from divrl.methods import REGISTRY, Stage
    from divrl.methods._fields import Unset

    config_fields = {f.name: f for f in dataclasses.fields(DivRLConfig)}
    state_keys = [m.state_key for m in REGISTRY.values() if m.state_key is not None]
    assert len(state_keys) == len(set(state_keys)), "two methods share a checkpoint key"
    for name, method in REGISTRY.items():
        own = {f.name for f in dataclasses.fields(method.Config)}
        assert own <= set(config_fields), f"{name}: its fields are not all DivRLConfig fields"
        assert method.switch in own, f"{name}: its switch {method.switch!r} is not one of its own fields"
        assert set(method.preset) <= own, f"{name}: its preset sets fields of other methods"
        for key in method.preset:  # a preset may only fill a field the user left unset
            assert isinstance(config_fields[key].default, Unset), f"{name}: preset field {key} has no Unset default"
        assert isinstance(method.stage, Stage)
        assert not method.enabled(DivRLConfig(**base_settings(Path("unused")))), f"{name} is on by default"


def test_preset_trainers_switch_on_their_method_and_nothing_else(tmp_path: Path) -> None:
    from trainer_helpers import make_config

    from divrl.methods import active
    from divrl.trainers import presets

    expected = {"IPSGRPOTrainer": {"ips", "outcome_keys"}, "QDGRPOTrainer": {"qd"},
                "MaxEntGRPOTrainer": {"maxent_entropy", "novelty", "length_bins"},
                "DivergenceGRPOTrainer": {"divergence"}, "PopulationGRPOTrainer": {"population"},
                "FlowRLTrainer": {"flowrl"}, "CountBonusGRPOTrainer": {"count_bonus", "outcome_keys"},
                "UnlikelinessGRPOTrainer": {"unlikeliness"}, "PassAtKGRPOTrainer": {"passk"}}
    for class_name, names in expected.items():
        args = make_config(tmp_path, num_generations=8, per_device_train_batch_size=8)  # pass@4 needs G > 4
        args.apply_preset(getattr(presets, class_name).preset)
        assert {m.name for m in active(args)} == names, class_name


# ------------------------------------------------------------------ docs, "Add a method": the worked example
def short_answer_method():
    """The docs' example (docs/add-a-method.md), as a user writes it in their own file: a bonus for valid short
    answers. Its definitions are read from the page and run here, so the page cannot drift from what is tested."""
    code = runnable_block("add-a-method.md")
    namespace: dict[str, Any] = {"__name__": "short_answer_example"}
    run_block(code[:code.index("\nargs = MyConfig(")], "docs/add-a-method.md", namespace)
    return namespace["ShortAnswer"], namespace["MyConfig"]


def test_a_method_added_outside_divrl_trains_in_one_file(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.methods import REGISTRY
    from divrl.testing import scripted_generation

    method, config_class = short_answer_method()
    texts = ["ab", "abcdef", "xyz", "hello"]  # short, long, short, long: every group holds 2 short answers
    try:
        with pytest.raises(ValueError, match=r"DivRLConfig\.short_max_chars"):
            config_class(**base_settings(tmp_path), short_bonus=1.0, short_max_chars=0)
        args = config_class(**base_settings(tmp_path, max_steps=1), short_bonus=1.0)
        tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
        trainer = DivRLTrainer(str(tiny_qwen3), args=args, train_dataset=prompt_dataset(PROMPTS),
                               processing_class=tokenizer, peft_config=lora_config(), task=ToyTask())
        assert trainer._name == "Short-answer GRPO" and "short-answer-grpo" in trainer._tag_names
        with scripted_generation(tokenizer, lambda prompt, row: texts[row % len(texts)]):
            trainer.train()
        bonus = list(trainer._logs["rewards"]["divrl_bonus"])
        assert bonus == [1.0, 0.0, 1.0, 0.0] * (len(bonus) // 4)
    finally:
        REGISTRY.pop(method.name)


def test_a_registered_method_is_off_for_configs_without_its_fields(tmp_path: Path) -> None:
    from trainer_helpers import make_config

    from divrl.methods import REGISTRY, active

    method, _ = short_answer_method()
    try:
        assert method not in active(make_config(tmp_path))  # a plain DivRLConfig lacks short_bonus: off, no error
    finally:
        REGISTRY.pop(method.name)


# ------------------------------------------------------------------ the shape issue 30 asks for
def test_the_trainer_is_flat() -> None:
    from trl import GRPOTrainer

    from divrl import DivRLTrainer

    assert DivRLTrainer.__bases__ == (GRPOTrainer,)


def _module_imports(root: Path) -> dict[str, set[str]]:
    """Module -> the divrl modules it imports anywhere (a lazy import inside a function is a circle too: the two
    modules still cannot be read or moved apart)."""
    import ast

    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
                edges.add(node.module)
                edges |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
        graph[name] = edges - {name}
    return graph


def test_no_import_circle_in_divrl() -> None:
    graph = _module_imports(Path(__file__).resolve().parents[2] / "src" / "divrl")
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])



def test_no_module_of_methods_imports_trainers() -> None:
    """Issue 46's layering: core, then methods, then trainers. A method module importing `divrl.trainers` (at the
    top or inside a function, absolutely or relatively) would be an arrow running back up."""
    import ast

    methods = Path(__file__).resolve().parents[2] / "src" / "divrl" / "methods"
    offenders = []
    for path in sorted(methods.rglob("*.py")):
        package = ["divrl", *path.relative_to(methods.parent).parent.parts]  # the package a relative import starts in
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            else:
                continue
            if any(name == "divrl.trainers" or name.startswith("divrl.trainers.") for name in names):
                offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, f"modules of divrl.methods import divrl.trainers: {offenders}"

def _field_uses(tree: Any, name: str) -> bool:
    """Whether code reads or sets a field `name`: `x.name`, `name=...` in a call, or getattr / setattr / hasattr
    with the literal name (strings elsewhere, such as the toy's component labels, are not uses of the field)."""
    import ast

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == name or isinstance(node, ast.keyword) and node.arg == name:
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and node.args[1].value == name):
            return True
    return False


def test_a_stage_methods_switch_is_used_in_its_own_file_and_at_most_one_aggregator() -> None:
    """Issue 30's criterion: a reward / advantage / loss method's code outside divrl.core is its method file; its
    switch field is used there and in at most one other file of src/divrl outside core/ (the toy backend reaches the
    fields through the registry; its runner reads a few of its own, e.g. passk as its pass@k metric's k)."""
    import ast
    import inspect

    from divrl.methods import REGISTRY, Stage

    src = Path(inspect.getfile(Stage)).parents[1]
    trees = {path: ast.parse(path.read_text()) for path in src.rglob("*.py")
             if path.relative_to(src).parts[0] != "core"}
    stage_methods = [m for m in REGISTRY.values() if m.stage in (Stage.REWARD, Stage.ADVANTAGE, Stage.LOSS)]
    assert len(stage_methods) >= 12
    for method in stage_methods:
        users = {path for path, tree in trees.items() if _field_uses(tree, method.switch)}
        own = Path(inspect.getfile(method))
        assert own in users, f"{method.name}: its own file does not use its switch {method.switch!r}"
        others = sorted(str(path.relative_to(src)) for path in users - {own})
        assert len(others) <= 1, f"{method.name}: switch {method.switch!r} is also used in {others}"


def test_the_registry_imports_neither_transformers_nor_peft() -> None:
    """The toy and every tool that reads the method registry start without transformers (and peft, which it pulls
    in): about 4 s of a cold start here (issue 60's first hour)."""
    code = ("import sys, divrl.methods; heavy = {'transformers', 'peft', 'trl'} & set(sys.modules); "
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
