"""Recipes, the task registry and the `divrl train` entry point."""

import functools
import importlib.util
import json
from pathlib import Path

import pytest

from divrl.methods.hooks import resolve_task_hooks
from divrl.task import build_task, task_names
from divrl.train import TrainScriptArguments, parse_recipe, task_args_with_overrides

RECIPES = Path(__file__).parents[2] / "recipes"
spec = importlib.util.spec_from_file_location("recipe_generator", RECIPES / "generate.py")
generator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generator)


def test_shipped_recipes_equal_the_generator_output():
    expected = generator.recipe_paths()
    shipped = set(RECIPES.glob("*/*/*.yaml"))
    assert shipped == set(expected), "run `python recipes/generate.py`"
    for path, settings in expected.items():
        assert path.read_text() == generator.render(path, settings), f"{path} is stale: rerun recipes/generate.py"


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*/*/*.yaml")), ids=lambda p: str(p.relative_to(RECIPES)))
def test_every_recipe_parses_into_the_three_argument_groups(path):
    # GPU recipes are parsed with CPU overrides: this machine has no GPU, the fields are what is checked.
    overrides = [] if "-cpu" in str(path) else ["--use_cpu", "true", "--bf16", "false"]
    script_args, config, model_args = parse_recipe(["--config", str(path), *overrides])
    assert script_args.task in task_names()
    method = path.stem
    # the chemical LM trains every weight, as REINVENT does; its populations are LoRA adapters on the shared base
    full_fine_tuning = "smiles-clm" in str(path) and not method.startswith("pop")
    assert model_args.use_peft != full_fine_tuning and model_args.lora_r == 16 and model_args.lora_alpha == 32
    assert config.ips == ("ips" in method)
    assert config.population == method.startswith("pop")
    assert (config.divergence is not None) == (method in ("fkl", "js"))
    # the task gives every hook the recipe's methods need (QD a behaviour descriptor, ...), as the trainer checks it
    resolve_task_hooks(config, _task(script_args.task, json.dumps(task_args_with_overrides(script_args))))


@functools.cache
def _task(name: str, task_args: str):
    return build_task(name, **json.loads(task_args))


def test_gpu_recipe_on_cpu_names_the_fix():
    with pytest.raises(SystemExit, match="--use_cpu true --bf16 false"):
        parse_recipe(["--config", str(RECIPES / "gemma-3-4b-it" / "hypospace-voxel" / "ips.yaml")])


def test_task_registry_builds_every_task_and_lists_choices(tmp_path):
    data = tmp_path / "data.jsonl"  # the dataset task reads your file: give it one
    data.write_text('{"prompt": "2 + 3 =", "answer": "5"}\n')
    for name in task_names():
        task = build_task(name, **({"path": str(data)} if name == "dataset" else {}))
        assert callable(task.reward_funcs()[0])
        assert callable(getattr(task, "train_dataset", None)), name
    with pytest.raises(ValueError, match="hypospace-voxel"):
        build_task("hypospace-voxels")
    with pytest.raises(ValueError, match="bad parameters"):
        build_task("hypospace-voxel", colour="red")


def test_task_arg_overrides_parse_yaml_values():
    args = TrainScriptArguments(task_args={"grid": 3, "max_height": 3}, task_arg=["max_height=2", "fixed=true"])
    assert task_args_with_overrides(args) == {"grid": 3, "max_height": 2, "fixed": True}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        task_args_with_overrides(TrainScriptArguments(task_arg=["oops"]))


@pytest.mark.parametrize("flags", [
    ["--task_arg", "operators=basic", "--task_arg", "max_depth=1"],  # repeated: argparse alone keeps the last
    ["--task_arg=operators=basic", "--task_arg", "max_depth=1"],
    ["--task_arg", "operators=basic", "max_depth=1"],
    ["--task-arg", "operators=basic", "--task_arg", "max_depth=1"],  # both spellings name the same field
])
def test_every_task_arg_override_applies(flags: list[str], tmp_path) -> None:
    from divrl import sft

    recipe = ["--config", "recipes/embedded-cpu/hypospace-boolean/grpo.yaml", "--output_dir", str(tmp_path)]
    script, _, _ = parse_recipe([*recipe[:2], *flags, *recipe[2:]])
    assert task_args_with_overrides(script) == {"operators": "basic", "max_depth": 1, "format_reward": 0.2}
    sft_script, _, _ = sft.parse_recipe(["--config", "recipes/sft/hypospace-boolean.yaml", *flags,
                                         "--output_dir", str(tmp_path)])
    assert {"operators": "basic", "max_depth": 1}.items() <= task_args_with_overrides(sft_script).items()


@pytest.mark.slow
@pytest.mark.parametrize(("task", "method", "metric"), [
    ("hypospace-voxel", "ips", "ips/distinct_outcomes"),
    ("hypospace-causal", "qd", "qd/coverage"),
    ("hypospace-boolean", "maxent", "maxent/alpha"),
    ("molecules", "fkl", "divergence/forward_kl"),
    ("ideas", "js", "divergence/js"),
    ("hypospace-boolean", "kl-cov", "cov/selected_fraction"),
    ("molecules", "clip-cov", "cov/selected_fraction"),
    ("hypospace-boolean", "flowrl", "flowrl/loss"),  # crashed once on the recipe's shared-prompt loss forward
    ("hypospace-boolean", "pop-ips-qd", "population/reward_0"),
])
def test_dry_run_trains_one_step_with_the_recipe_settings(task, method, metric, tmp_path):
    """One embedded-cpu recipe per task (each with a different method) builds and trains a step in a dry run."""
    from divrl.cli import main

    recipe = RECIPES / "embedded-cpu" / task / f"{method}.yaml"
    assert main(["train", str(recipe), "--dry_run", "true", "--output_dir", str(tmp_path)]) == 0
    run = tmp_path / "dry-run"
    state = json.loads((run / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert metric in {key for entry in state["log_history"] for key in entry}
    assert (run / "adapter_model.safetensors").is_file()
