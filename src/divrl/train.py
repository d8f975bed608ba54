"""`divrl train RECIPE.yaml` / `accelerate launch -m divrl.train --config RECIPE.yaml`: one recipe, any hardware.

A recipe is one YAML file holding three argument groups, parsed TRL-style by `TrlParser`:
`TrainScriptArguments` (task and data), `DivRLConfig` (GRPO + diversity methods) and TRL's `ModelConfig`
(model, dtype, LoRA, 4-bit). Any field can be overridden on the command line (`--learning_rate 1e-5`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from divrl.task import build_task, task_names


@dataclass
class TrainScriptArguments:
    """What to train on: the task, its parameters and how its prompts are built."""

    task: str = field(default="hypospace-voxel", metadata={"help": f"Task name, one of: {', '.join(task_names())}."})
    task_args: dict = field(default_factory=dict, metadata={
        "help": "Task constructor parameters as a YAML mapping, e.g. {grid: 3, max_height: 3, max_blocks: 3}."})
    task_arg: list[str] = field(default_factory=list, metadata={
        "help": "Command-line overrides of task_args as KEY=VALUE (repeatable; VALUE parsed as YAML)."})
    prompt_style: str = field(default="auto", metadata={
        "help": "'chat' (instruct models), 'base' (few-shot plain text) or 'auto' (chat iff the tokenizer has a "
                "chat template)."})
    split: str = field(default="train", metadata={"help": "Dataset split to train on (the test split is held out)."})
    split_seed: int = field(default=0, metadata={"help": "Seed of the deterministic train/test split."})
    instance_limit: int | None = field(default=None, metadata={
        "help": "Instances kept before the train/test split (the IPS paper: 100, split 50/50); prompts for molecules."})
    n_exemplars: int = field(default=3, metadata={"help": "Few-shot examples in 'base' prompts."})
    quantize: str = field(default="auto", metadata={
        "help": "'auto' (4-bit NF4 on CUDA, unquantized on CPU), '4bit' or 'none'. Overrides ModelConfig's "
                "load_in_4bit, which is ignored."})
    dry_run: bool = field(default=False, metadata={
        "help": "Build everything with the recipe's settings on a tiny local model and run one step."})


def task_args_with_overrides(script_args: TrainScriptArguments) -> dict[str, Any]:
    """task_args merged with the KEY=VALUE overrides (values parsed as YAML scalars)."""
    import yaml

    merged = dict(script_args.task_args)
    for item in script_args.task_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--task_arg expects KEY=VALUE, got {item!r}")
        merged[key.strip()] = yaml.safe_load(value)
    return merged


def build_trainer(script_args: TrainScriptArguments, training_args: Any, model_args: Any) -> Any:
    """Task, dataset, model and LoRA, wired into a `DivRLTrainer` that runs the methods the config enables."""
    from divrl.models import default_lora_config, load_model_and_tokenizer
    from divrl.trainers.divrl_trainer import DivRLTrainer

    task = build_task(script_args.task, **task_args_with_overrides(script_args))
    model_name = model_args.model_name_or_path
    if script_args.dry_run:
        from divrl.testing import build_tiny_model

        model_name = str(build_tiny_model("qwen3", f"{training_args.output_dir}/tiny-model"))
        training_args.max_steps = 1
    if not model_name:
        raise ValueError("model_name_or_path is required (a hub id, a local path or embedded:gemma-3-270m)")
    model, tokenizer = load_model_and_tokenizer(model_name, quantize=script_args.quantize, dtype=model_args.dtype)
    style = script_args.prompt_style
    if style == "auto":
        style = "chat" if getattr(tokenizer, "chat_template", None) else "base"
    dataset = task.train_dataset(split=script_args.split, style=style, seed=script_args.split_seed,
                                 limit=script_args.instance_limit, n_exemplars=script_args.n_exemplars)
    peft_config = None
    if model_args.use_peft:
        peft_config = default_lora_config(
            r=model_args.lora_r, lora_alpha=model_args.lora_alpha, lora_dropout=model_args.lora_dropout,
            **({"target_modules": model_args.lora_target_modules} if model_args.lora_target_modules else {}),
        )
    return DivRLTrainer(model=model, reward_funcs=task.reward_funcs(), args=training_args, train_dataset=dataset,
                       processing_class=tokenizer, peft_config=peft_config, task=task)


def parse_recipe(argv: Sequence[str] | None = None) -> tuple[Any, Any, Any]:
    """Parse `--config RECIPE.yaml` plus overrides into (script args, DivRLConfig, ModelConfig)."""
    from trl import ModelConfig, TrlParser

    from divrl.trainers.config import DivRLConfig

    parser = TrlParser((TrainScriptArguments, DivRLConfig, ModelConfig))
    try:
        return parser.parse_args_and_config(list(argv) if argv is not None else None)
    except ValueError as error:
        if "bf16" in str(error) or "gpu" in str(error).lower():
            raise SystemExit(
                f"{error}\nThis recipe asks for a GPU setting (bf16/CUDA) and none is available: use its CPU "
                "variant (recipes/*-cpu.yaml) or add `--use_cpu true --bf16 false`."
            ) from error
        raise


def main(argv: Sequence[str] | None = None) -> int:
    """Train from a recipe; resumes with --resume_from_checkpoint (a path, or true for the latest)."""
    script_args, training_args, model_args = parse_recipe(argv)
    trainer = build_trainer(script_args, training_args, model_args)
    resume = training_args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() in ("true", "false"):
        resume = resume.lower() == "true"
    trainer.train(resume_from_checkpoint=resume or None)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json in the run dir: what `divrl plot` and `divrl fit-law` read
    trainer.accelerator.end_training()  # closes trackers and the process group, so no rank aborts at exit
    return 0


def _train_command(args: argparse.Namespace) -> int:
    return main(["--config", args.recipe, *args.overrides])


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl train RECIPE.yaml [--field value ...]`."""
    parser = subparsers.add_parser(
        "train", help="Train from a YAML recipe (same as accelerate launch -m divrl.train --config RECIPE).",
        description="Any recipe field can be overridden: divrl train recipes/x.yaml --max_steps 10 --ips true",
    )
    parser.add_argument("recipe", help="YAML recipe (see recipes/README.md)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="--field value pairs overriding the recipe")
    parser.set_defaults(func=_train_command)


if __name__ == "__main__":
    sys.exit(main())
