"""`divrl train RECIPE.yaml` / `accelerate launch -m divrl.train --config RECIPE.yaml`: one recipe, any hardware.

A recipe is one YAML file holding three argument groups, parsed TRL-style by `TrlParser`:
`TrainScriptArguments` (task and data), `DivRLConfig` (GRPO + diversity methods) and TRL's `ModelConfig`
(model, dtype, LoRA, 4-bit). Any field can be overridden on the command line (`--learning_rate 1e-5`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from divrl.recipe_checks import (
    RecipeOrigin,
    check_context_length,
    check_recipe_types,
    check_recipe_values,
    check_task_settings,
    one_line_errors,
)
from divrl.shipped_recipes import resolve_recipe, where_to_look
from divrl.task import (
    JOURNAL_FILE,
    build_task,
    has_hook,
    parse_task_args,
    read_prompts,
    resolve_prompt_style,
    task_names,
)
from divrl.tasks import DEFAULT_TASK

# A dry run writes here, under the recipe's output_dir, so a real run's `--resume_from_checkpoint true` never
# finds the tiny model's checkpoints (it looks for checkpoint-* directly in output_dir).
DRY_RUN_SUBDIR = "dry-run"
TASK_ARG_FLAGS = ("--task_arg", "--task-arg")  # HfArgumentParser accepts both spellings of a field
# What a dry run forces so that a GPU recipe checks out on a CPU-only machine.
DRY_RUN_OVERRIDES = ("--use_cpu", "true", "--bf16", "false", "--fp16", "false", "--dtype", "float32",
                     "--use_vllm", "false")  # vLLM needs a GPU: a dry run generates with transformers


@dataclass
class TaskArguments:
    """The task, its parameters and its deterministic train/test split (shared by `divrl train` and `divrl sft`)."""

    task: str = field(default=DEFAULT_TASK, metadata={
        "help": f"Task name, one of: {', '.join(task_names())}; or your own task as package.module:Factory or "
                "path/to/task.py:Factory (task_args go to the factory)."})
    task_args: dict = field(default_factory=dict, metadata={
        "help": "Task constructor parameters as a YAML mapping, e.g. {grid: 3, max_height: 3, max_blocks: 3}."})
    task_arg: list[str] = field(default_factory=list, metadata={
        "help": "Command-line overrides of task_args as KEY=VALUE (repeatable; VALUE parsed as YAML)."})
    split_seed: int = field(default=0, metadata={"help": "Seed of the deterministic train/test split."})
    instance_limit: int | None = field(default=None, metadata={
        "help": "Instances (or prompts) kept before the train/test split (the IPS paper: 100, split 50/50)."})
    split: str = field(default="train", metadata={
        "help": "Dataset split to train on (the test split is held out; a task may offer more, e.g. 'fit': train "
                "less its 'dev' fifth, for choosing settings on train data alone)."})


@dataclass
class RecoveryEvalArguments(TaskArguments):
    """Held-out recovery while training, for a task that measures it (shared by `divrl train` and `divrl sft`)."""

    recovery_eval: bool = field(default=False, metadata={
        "help": "Evaluate held-out recovery during training, for a task with a recovery_eval_callback hook: the "
                "callback samples the policy on the test split and logs divrl/eval/recovery@n, divrl/eval/validity and "
                "divrl/eval/uniqueness before the first step, every eval_steps (else logging_steps) and at the "
                "last step. Independent of eval_strategy (TRL's own eval loop)."})
    recovery_eval_instances: int = field(default=8, metadata={
        "help": "Held-out instances per recovery evaluation (the first ones of the test split; 0 = all)."})
    recovery_eval_samples: int = field(default=8, metadata={
        "help": "Completions N per instance in a recovery evaluation."})
    recovery_eval_max_new_tokens: int | None = field(default=None, metadata={
        "help": "Token limit of recovery-evaluation completions (default: max_completion_length; `divrl sft` has "
                "none, so needs it)."})


@dataclass
class TrainScriptArguments(RecoveryEvalArguments):
    """What to train on: the task, its parameters and how its prompts are built."""

    prompt_style: str = field(default="auto", metadata={
        "help": "'chat' (instruct models), 'base' (few-shot plain text), 'auto' (chat iff the tokenizer has a "
                "chat template) or 'clm' (an empty prompt, BOS alone: a chemical LM, for a task that offers it)."})
    n_exemplars: int = field(default=3, metadata={"help": "Few-shot examples in 'base' prompts."})
    quantize: str = field(default="auto", metadata={
        "help": "'auto' (on CUDA: bf16 when 2x the bf16 weights + 4 GiB fit the free GPU memory, else 4-bit NF4; "
                "unquantized on CPU), '4bit' or 'none'. Overrides ModelConfig's "
                "load_in_4bit, which is ignored."})
    train_prompts: str | None = field(default=None, metadata={
        "help": "JSONL file of prompts to train on, one {\"prompt\": ...} per line (e.g. OUT/exploration.jsonl of "
                "`divrl sample-reference --split`, DPH-RL's exploration set): rows of the split whose prompt is not "
                "listed are dropped. Default: every row."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Train from scratch into an output_dir that already holds a run (checkpoints or a trainer state); "
                "without it `divrl train` refuses, so that a forgotten --resume_from_checkpoint loses no run."})
    dry_run: bool = field(default=False, metadata={
        "help": f"Build everything with the recipe's settings on a tiny local model and run one step, on the CPU "
                f"(use_cpu, no bf16, float32, no vLLM), writing into OUTPUT_DIR/{DRY_RUN_SUBDIR} (never the real run's "
                "checkpoints); resume_from_checkpoint is ignored."})


def merge_repeated_task_args(args: Sequence[str]) -> list[str]:
    """`args` with every `--task_arg` (or `--task-arg`) occurrence gathered into one at the end: argparse keeps only
    the last occurrence of a repeated flag, so `--task_arg a=1 --task_arg b=2` would silently drop a=1."""
    merged, rest, seen = [], [], False
    items = iter(args)
    arg = next(items, None)
    while arg is not None:
        flag, sep, inline = arg.partition("=")
        if flag in TASK_ARG_FLAGS:
            seen = True
            if sep:
                merged.append(inline)
                arg = next(items, None)
                continue
            arg = next(items, None)
            while arg is not None and not arg.startswith("-"):  # KEY=VALUE starts with its key
                merged.append(arg)
                arg = next(items, None)
            continue
        rest.append(arg)
        arg = next(items, None)
    return rest + ["--task_arg", *merged] if seen else rest  # a bare --task_arg stays, for argparse's own error


def task_args_with_overrides(script_args: TaskArguments) -> dict[str, Any]:
    """task_args merged with the KEY=VALUE overrides (values parsed as YAML scalars)."""
    if not isinstance(script_args.task_args, dict):
        raise ValueError(f"task_args must be a mapping of task parameters, got {script_args.task_args!r}")
    return {**script_args.task_args, **parse_task_args(script_args.task_arg)}


def build_trainer(script_args: TrainScriptArguments, training_args: Any, model_args: Any) -> Any:
    """Task, dataset, model and LoRA, wired into a `DivRLTrainer` that runs the methods the config enables."""
    from divrl.models import load_model_and_tokenizer, lora_config_from_model_args
    from divrl.trainers.divrl_trainer import DivRLTrainer
    from divrl.trainers.model_card import card_facts

    task_args = task_args_with_overrides(script_args)
    task = build_task(script_args.task, **task_args)
    check_task_settings(task, script_args, training_args, getattr(script_args, "recipe_origin", RecipeOrigin(None)))
    check_recovery_eval(task, script_args)
    # Every LoRA option of ModelConfig (DoRA, rsLoRA, modules_to_save, target_parameters, ...) via TRL's
    # get_peft_config; options an enabled method cannot train with are refused here, before the model loads.
    peft_config = lora_config_from_model_args(model_args, training_args)
    model_name = (dry_run_model(training_args, clm=script_args.prompt_style == "clm") if script_args.dry_run
                  else model_args.model_name_or_path)
    if not model_name:
        raise ValueError("model_name_or_path is required (a hub id, a local path or embedded:gemma-3-270m)")
    model, tokenizer = load_model_and_tokenizer(model_name, quantize=script_args.quantize, dtype=model_args.dtype,
                                                attn_implementation=model_args.attn_implementation,
                                                revision=model_args.model_revision,
                                                trust_remote_code=training_args.trust_remote_code,
                                                cpu=training_args.use_cpu)
    style = resolve_prompt_style(script_args.prompt_style, bool(getattr(tokenizer, "chat_template", None)))
    dataset = task.train_dataset(split=script_args.split, style=style, seed=script_args.split_seed,
                                 limit=script_args.instance_limit, n_exemplars=script_args.n_exemplars)
    if script_args.train_prompts is not None:
        dataset = keep_listed_prompts(dataset, Path(script_args.train_prompts))
    check_context_length(model, tokenizer, dataset, training_args, getattr(script_args, "recipe_origin",
                                                                           RecipeOrigin(None)))
    eval_dataset = None  # the held-out split, for the recovery callback and TRL's own eval loop (eval_strategy)
    trl_eval = getattr(training_args.eval_strategy, "value", training_args.eval_strategy) != "no"
    if script_args.recovery_eval or trl_eval:
        eval_dataset = task.train_dataset(split="test", style=style, seed=script_args.split_seed,
                                          limit=script_args.instance_limit, n_exemplars=script_args.n_exemplars)
    # TRL's eval loop needs eval_dataset at construction. Recovery evaluation alone attaches it afterwards: the
    # population method takes its member-selection prompts from a constructor-time eval_dataset, and evaluating
    # must not change what is trained (nor select members on held-out instances).
    trainer = DivRLTrainer(model=model, reward_funcs=task.reward_funcs(), args=training_args, train_dataset=dataset,
                           eval_dataset=eval_dataset if trl_eval else None, processing_class=tokenizer,
                           peft_config=peft_config, task=task)
    trainer.card_facts = card_facts(script_args.task, task_args, getattr(script_args, "command", None))
    if script_args.recovery_eval:
        trainer.eval_dataset = eval_dataset
        add_recovery_eval(trainer, task, script_args, eval_dataset)
    return trainer


def check_recovery_eval(task: Any, script_args: RecoveryEvalArguments) -> None:
    """Refuse recovery_eval, before the model loads, for a task that does not measure held-out recovery (it has no
    `recovery_eval_callback` hook)."""
    if script_args.recovery_eval and not has_hook(task, "recovery_eval_callback"):
        raise ValueError(f"recovery_eval needs a task that measures held-out recovery (a recovery_eval_callback hook); "
                         f"task {script_args.task!r} has none (set recovery_eval false)")


def add_recovery_eval(trainer: Any, task: Any, script_args: RecoveryEvalArguments, held_out: Any) -> None:
    """Attach the task's recovery callback with the recipe's recovery_eval_* settings, sampling `held_out` (the test
    split's rows)."""
    trainer.add_callback(task.recovery_eval_callback(
        trainer, held_out, instances=script_args.recovery_eval_instances,
        samples=script_args.recovery_eval_samples, max_new_tokens=script_args.recovery_eval_max_new_tokens))


def keep_listed_prompts(dataset: Any, path: Path) -> Any:
    """The rows of `dataset` whose prompt `path` lists (JSONL of {"prompt": ...}); ValueError naming the file when it
    lists none of them (another task, split or prompt style)."""
    listed = {json.dumps(prompt, sort_keys=True) for prompt in read_prompts(path, "prompt")}
    kept = dataset.filter(lambda row: json.dumps(row["prompt"], sort_keys=True) in listed)
    if len(kept) == 0:
        raise ValueError(f"train_prompts: none of the {len(listed)} prompts in {str(path)!r} is a prompt of this "
                         "recipe's training split (sample it with `divrl sample-reference --recipe` from the same "
                         "recipe, model and prompt style)")
    return kept


def dry_run_model(training_args: Any, clm: bool = False) -> str:
    """Write the tiny local model a dry run trains (once per machine, before the other processes read it): a tiny
    Qwen3, or with `clm` (prompt_style clm) a tiny chemical LM over SMILES tokens."""
    from divrl.testing import build_tiny_clm, build_tiny_model

    path = Path(training_args.output_dir) / "tiny-model"
    with training_args.main_process_first(local=True, desc="dry run: building the tiny model"):
        if training_args.local_process_index == 0:
            build_tiny_clm(path) if clm else build_tiny_model("qwen3", path)
    return str(path)


def _unique_key_loader() -> type:
    """yaml's SafeLoader refusing a mapping that repeats a key (SafeLoader keeps the last value silently)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice (the first would be ignored)", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def load_recipe_file(config_path: str) -> dict[str, Any]:
    """The recipe's YAML mapping, or a ValueError naming the file and what is wrong with it."""
    import yaml

    path = Path(config_path)
    if path.is_dir():
        raise ValueError(f"recipe file {config_path!r} is a directory: name a YAML recipe in it ({where_to_look()})")
    if not path.is_file():
        raise ValueError(f"recipe file {config_path!r} does not exist ({where_to_look()})")
    try:
        recipe = yaml.load(path.read_text(), Loader=_unique_key_loader())  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"recipe file {config_path!r} is not valid YAML: {problem}{where}") from None
    if not isinstance(recipe, dict):
        raise ValueError(f"recipe file {config_path!r} must hold a YAML mapping of field: value, "
                         f"got {type(recipe).__name__}")
    return recipe


def _asks_for_dry_run(argv: list[str], recipe: dict[str, Any]) -> bool:
    """Whether --dry_run is on (the command line overrides the recipe), known before the configs are built."""
    from transformers.hf_argparser import string_to_bool

    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--dry_run", type=string_to_bool, nargs="?", const=True, default=None)
    flag = parser.parse_known_args(argv)[0].dry_run
    return bool(recipe.get("dry_run", False) if flag is None else flag)


def _cpu_variant(config_path: str | None) -> str:
    """The embedded-cpu recipe with the same task and method as `config_path`, or the pattern naming it."""
    if config_path:
        path = Path(config_path)
        variant = path.parent.parent.parent / "embedded-cpu" / path.parent.name / path.name
        if variant.is_file():
            return str(variant)
    return "recipes/embedded-cpu/<task>/<method>.yaml"


def check_report_to(report_to: Sequence[str]) -> None:
    """Refuse a `report_to` integration that is unknown or not installed before anything is built."""
    from transformers.integrations import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

    available = get_available_reporting_integrations()
    for name in report_to:
        if name not in INTEGRATION_TO_CALLBACK:
            raise ValueError(f"report_to {name!r} is not a known integration; choose from "
                             f"{', '.join(sorted(INTEGRATION_TO_CALLBACK))} or 'none'")
        if name not in available:
            raise ValueError(f"report_to {name!r} needs its package, which is not installed here: pip install "
                             f"{name} (or pass --report_to none)")


def read_command_line(argv: Sequence[str]) -> tuple[list[str], str | None, dict[str, Any], RecipeOrigin]:
    """The arguments (repeated --task_arg merged), the --config recipe's path and mapping, and where each field came
    from: what every verb that reads a recipe (`divrl train`, `divrl sft`) starts from."""
    args = merge_repeated_task_args(argv)
    config_path = None
    if "--config" in args:
        if args[-1] == "--config":
            raise ValueError("--config needs the path of a recipe file")
        at = args.index("--config") + 1
        config_path = args[at] = resolve_recipe(args[at])  # a file, else a shipped recipe's name
    recipe = load_recipe_file(config_path) if config_path else {}
    return args, config_path, recipe, RecipeOrigin.of(config_path, recipe, args)


def recipe_parser(groups: tuple[type, ...], recipe: dict[str, Any], origin: RecipeOrigin) -> Any:
    """TRL's parser of `groups`, once the recipe's types and field names are checked; its errors are one line naming
    the field and the recipe file or command line (recipe_checks)."""
    from trl import TrlParser

    parser = TrlParser(groups)
    check_recipe_types(parser, groups, recipe, origin)
    one_line_errors(parser, origin)
    return parser


def recipe_command(argv: list[str], command: str = "train") -> str:
    """The command that made this run, as a model card records it: what the user typed when the `divrl` program
    started this process (`divrl train RECIPE ...`, or `divrl demo ...`, whose trainings run inside it), else the
    `divrl COMMAND RECIPE ...` line that `argv` (`--config RECIPE ...`) stands for; absolute paths under the working
    folder or home written relative to it (`portable_args`), so the card names no machine's folders."""
    import shlex

    from divrl.trainers.model_card import portable_args

    if Path(sys.argv[0]).name == "divrl":
        return shlex.join(["divrl", *portable_args(sys.argv[1:])])
    if argv[:1] == ["--config"] and len(argv) > 1:
        return shlex.join(["divrl", command, *portable_args(argv[1:])])
    return shlex.join(["python", "-m", f"divrl.{command}", *portable_args(argv)])


def parse_recipe(argv: Sequence[str] | None = None) -> tuple[Any, Any, Any]:
    """Parse `--config RECIPE.yaml` plus overrides into (script args, DivRLConfig, ModelConfig).

    Bad input (a missing or malformed recipe, a GPU setting without a GPU, an unavailable `report_to`) is a
    ValueError or SystemExit naming the problem. A dry run is forced onto the CPU and into OUTPUT_DIR/dry-run.
    """
    from trl import ModelConfig

    from divrl.trainers.config import DivRLConfig

    argv = list(argv if argv is not None else sys.argv[1:])
    args, config_path, recipe, origin = read_command_line(argv)
    parser = recipe_parser((TrainScriptArguments, DivRLConfig, ModelConfig), recipe, origin)
    dry_run = _asks_for_dry_run(args, recipe)
    if dry_run:
        args += DRY_RUN_OVERRIDES
    try:
        script_args, training_args, model_args = parser.parse_args_and_config(args)
    except ValueError as error:
        if "bf16" in str(error) or "gpu" in str(error).lower():
            raise SystemExit(
                f"{error}\nThis recipe asks for a GPU setting (bf16/CUDA) and none is available: run its CPU "
                f"variant {_cpu_variant(config_path)} (the embedded model), or keep this model on the CPU with "
                "`--use_cpu true --bf16 false --dtype float32` (slow for a multi-billion-parameter model)."
            ) from error
        raise
    check_recipe_values(script_args, training_args, model_args, origin)
    script_args.recipe_origin = origin  # for the task-dependent checks in build_trainer
    script_args.command = recipe_command(argv)  # for the model card
    check_report_to(training_args.report_to)
    if dry_run:
        training_args.output_dir = str(Path(training_args.output_dir) / DRY_RUN_SUBDIR)
        training_args.max_steps = 1
        training_args.resume_from_checkpoint = None
    return script_args, training_args, model_args


def check_output_dir(output_dir: str, resume: str | bool | None, overwrite: bool, kind: str = "train") -> None:
    """Refuse to start a `divrl KIND` run (train or sft) in a folder holding a run, then record KIND in it
    (`divrl.run_lock.RUN_RECORD`): from scratch, the run's checkpoints would be rotated away unasked; a run of the
    other kind is refused even when resuming, which would adopt its checkpoints as this run's. overwrite lifts both."""
    from divrl.run_lock import record_run_kind, run_kind
    from divrl.trainers.checkpoint import TRAINER_STATE_FILE

    folder = Path(output_dir)
    held = sorted(p.name for p in folder.glob("checkpoint-*")) + [  # a journal alone: killed before its first save
        name for name in (TRAINER_STATE_FILE, JOURNAL_FILE)
        if (folder / name).is_file() and (folder / name).stat().st_size]
    if held and not overwrite:
        holds = run_kind(output_dir)
        if holds is not None and holds[0] != kind:
            raise ValueError(f"output_dir {output_dir!r} holds a `divrl {holds[0]}` run ({holds[1]}), which "
                             f"`divrl {kind}` must not resume or train over: choose another output_dir, or pass "
                             "--overwrite_output_dir true to start from scratch in it")
        if not resume:
            raise ValueError(f"output_dir {output_dir!r} already holds a run ({', '.join(held[:3])}): resume with "
                             "--resume_from_checkpoint true, or pass --overwrite_output_dir true to train from scratch")
    record_run_kind(output_dir, kind)


def main(argv: Sequence[str] | None = None) -> int:
    """Train from a recipe; resumes with --resume_from_checkpoint (a path, or true for the latest). The run holds
    output_dir's lock throughout (`divrl.run_lock`): a second process training into it refuses."""
    from divrl.cpu_threads import use_free_cores
    from divrl.run_lock import training_run_lock

    script_args, training_args, model_args = parse_recipe(argv)
    use_free_cores()
    with training_run_lock(training_args):
        return train_locked(script_args, training_args, model_args)


def train_locked(script_args: TrainScriptArguments, training_args: Any, model_args: Any) -> int:
    """`main`'s training, once it holds output_dir's lock."""
    from divrl.trainers.checkpoint import RunFinished, final_save_done, save_final

    resume = training_args.resume_from_checkpoint
    if isinstance(resume, str) and resume.lower() in ("true", "false"):
        resume = resume.lower() == "true"
    if not script_args.dry_run:  # a dry run writes into its own OUTPUT_DIR/dry-run
        check_output_dir(training_args.output_dir, resume, script_args.overwrite_output_dir)
    trainer = build_trainer(script_args, training_args, model_args)
    try:
        trainer.train(resume_from_checkpoint=resume or None)
    except RunFinished as finished:
        if final_save_done(training_args.output_dir):
            print(f"divrl train: nothing to do: {finished}", flush=True)
            return 0
        print(f"divrl train: the run has finished but its final save is missing: writing it from "
              f"{finished.checkpoint}", flush=True)
        load_finished_checkpoint(trainer, finished.checkpoint)
    # the model and trainer_state.json in the run dir (what `divrl plot` and `divrl fit-law` read), all or nothing
    save_final(trainer, training_args.output_dir)
    # Ranks other than 0 reach the end right after training's last collective; tearing down then can deadlock
    # (torch's gloo worker still frees that collective's tensors, needing the GIL the process-group destructor
    # holds: seen as a rank hanging at exit under cpu_2proc). Waiting here for rank 0's saving lets it finish.
    trainer.accelerator.wait_for_everyone()
    trainer.accelerator.end_training()  # closes trackers and the process group, so no rank aborts at exit
    if script_args.dry_run and trainer.accelerator.is_main_process:
        print(f"ok: dry run passed (one step of the recipe's settings on a tiny model): written to "
              f"{training_args.output_dir}", flush=True)
    return 0


def load_finished_checkpoint(trainer: Any, checkpoint: str) -> None:
    """Give `trainer` the weights and trainer state of a finished run's last checkpoint, for its final save."""
    from transformers import TrainerState

    from divrl.trainers.checkpoint import TRAINER_STATE_FILE

    trainer._load_from_checkpoint(checkpoint)
    trainer.state = TrainerState.load_from_json(os.path.join(checkpoint, TRAINER_STATE_FILE))


def register_recipe_command(subparsers: argparse._SubParsersAction, name: str, run: Callable[[list[str]], int],
                            help: str, example: str, **parser_kwargs: Any) -> argparse.ArgumentParser:
    """Add `divrl NAME RECIPE.yaml [--field value ...]`, calling `run(["--config", RECIPE, *overrides])`."""
    parser = subparsers.add_parser(name, help=help, **parser_kwargs,
                                   description=f"Any recipe field can be overridden: divrl {name} {example}")
    parser.add_argument("recipe", help="a YAML recipe file, or a shipped recipe's name (divrl recipes lists them)")
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="--field value pairs overriding the recipe")
    parser.set_defaults(func=lambda args: run(["--config", args.recipe, *args.overrides]))
    return parser


# TRL / transformers fields a recipe most often sets (the rest: `divrl train --help-all`).
COMMON_TRL_FIELDS = ("model_name_or_path", "output_dir", "max_steps", "learning_rate", "num_generations",
                     "per_device_train_batch_size", "max_completion_length", "temperature", "beta", "seed",
                     "logging_steps", "save_steps", "use_peft", "lora_r", "use_cpu", "bf16")


def train_help(parser: argparse.ArgumentParser) -> str:
    """`divrl train --help`: usage, then divrl's task, run and method fields (name, default, what each is),
    generated from the dataclasses a recipe is parsed into, without importing torch or TRL (`divrl.settings_help`)."""
    import textwrap

    from divrl.settings_help import HELP_WIDTH, field_lines, field_rows, help_index, methods_text

    index = help_index()
    return "\n".join([
        parser.format_help().rstrip(), "",
        "Recipe fields (a YAML key, or --field value on the command line; name, default, what it is):", "",
        "Task, data and run:", *field_lines([*field_rows(TrainScriptArguments), *index["run_fields"]]), "",
        "Methods (all off by default; any subset combines):", methods_text(with_papers=False, index=index), "",
        *textwrap.wrap("TRL, transformers and the model (e.g. " + ", ".join(COMMON_TRL_FIELDS) + "): divrl train "
                       "--help-all lists every field. A dry run (--dry_run true) writes into "
                       f"OUTPUT_DIR/{DRY_RUN_SUBDIR}/. Each method's paper: divrl train --list-methods (or divrl "
                       "methods).", HELP_WIDTH, break_on_hyphens=False),
    ])


def full_help() -> str:
    """`divrl train --help-all`: TRL's parser help of every field a recipe takes (about 1,700 lines)."""
    from trl import ModelConfig, TrlParser

    from divrl.trainers.config import DivRLConfig

    return TrlParser((TrainScriptArguments, DivRLConfig, ModelConfig), prog="divrl train RECIPE").format_help()


def _list_methods(_: argparse.ArgumentParser) -> str:
    from divrl.settings_help import list_methods

    return list_methods()


# divrl train's help options: (flags, what each prints given the parser, its help line).
TRAIN_HELP_OPTIONS: tuple[tuple[tuple[str, ...], Callable[[argparse.ArgumentParser], str], str], ...] = (
    (("-h", "--help"), train_help, "show this help and divrl's fields (task, run, each method's), then exit"),
    (("--help-all",), lambda _: full_help(),
     "show every field, TRL's and transformers' included (about 1,700 lines), then exit"),
    (("--list-methods",), _list_methods, "show each method's fields, what it does and its papers, then exit"),
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl train RECIPE.yaml [--field value ...]` with TRAIN_HELP_OPTIONS; a help option after the recipe
    (where argparse hands it on to the overrides) prints the same."""
    from divrl.settings_help import PrintAndExit

    parser = register_recipe_command(subparsers, "train", main,
                                     "Train from a YAML recipe (same as accelerate launch -m divrl.train --config "
                                     "RECIPE).", "recipes/x.yaml --max_steps 10 --ips true", add_help=False)
    for flags, text, help in TRAIN_HELP_OPTIONS:
        parser.add_argument(*flags, action=PrintAndExit, text=text, help=help)

    def run(args: argparse.Namespace) -> int:
        asked = next((text for flags, text, _ in TRAIN_HELP_OPTIONS if set(flags) & set(args.overrides)), None)
        if asked is not None:
            print(asked(parser))
            return 0
        return main(["--config", args.recipe, *args.overrides])

    parser.set_defaults(func=run)


if __name__ == "__main__":
    from divrl.quiet import quiet_console
    from divrl.run_lock import exit_with_error

    quiet_console()
    try:
        sys.exit(main())
    except (ValueError, OSError) as error:  # bad input: one line naming the problem, as `divrl train` prints it
        exit_with_error(f"divrl.train: error: {error}")
