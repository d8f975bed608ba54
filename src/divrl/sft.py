"""`divrl sft RECIPE.yaml`: a supervised warm start (TRL's SFTTrainer, LoRA) before RL on a structured task.

A base 270M model almost never writes a valid voxel structure, so GRPO's groups carry no signal. This command
fine-tunes on the TRAIN split (observations -> admissible hypotheses drawn uniformly, `task.sft_dataset`) so the
model learns the answer format, then merges the adapter into the base weights and saves the result as a full
checkpoint in OUTPUT_DIR/merged: RL starts from it with `divrl train RL_RECIPE --model_name_or_path
OUTPUT_DIR/merged`, its reference policy (adapter disabled) is then the SFT model, and `divrl eval recovery
--model OUTPUT_DIR/merged` gives the SFT-only row. The recipe holds `SFTScriptArguments`, TRL's `SFTConfig` and
`ModelConfig` (LoRA), parsed TRL-style; any field can be overridden on the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from divrl.task import build_task
from divrl.train import (
    RecoveryEvalArguments,
    add_recovery_eval,
    check_output_dir,
    check_recovery_eval,
    read_command_line,
    recipe_command,
    recipe_parser,
    register_recipe_command,
    task_args_with_overrides,
)

MERGED_SUBDIR = "merged"


@dataclass
class SFTScriptArguments(RecoveryEvalArguments):
    """What to warm-start on: a task with warm-start data (`sft_dataset`), its split and prompts, and how many
    answers per instance; and optionally the held-out recovery curve while it trains (recovery_eval, as in `divrl
    train`)."""

    prompt_style: str = field(default="base", metadata={
        "help": "'base' (plain text; the completion continues the answer label and ends with the END line) or "
                "'chat'. RL after SFT must use the same style and n_exemplars."})
    n_exemplars: int = field(default=0, metadata={
        "help": "Worked examples in base prompts (0: rules and observations only, the short zero-shot prompt)."})
    hypotheses_per_instance: int = field(default=4, metadata={
        "help": "Admissible hypotheses per training instance, drawn uniformly without replacement (one row each)."})
    sample_seed: int = field(default=0, metadata={"help": "Seed of the hypothesis draw."})
    quantize: str = field(default="none", metadata={
        "help": "'none', 'auto' (on CUDA bf16 where it fits, else NF4) or '4bit' (NF4 on CUDA). The merged "
                "checkpoint is always written unquantized (merging into 4-bit weights would requantise them): RL may "
                "load it in 4-bit again."})
    merge: bool = field(default=True, metadata={
        "help": "Write OUTPUT_DIR/merged: base + adapter as one checkpoint that RL and evaluation load by path."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Start from scratch in an output_dir that already holds a run (checkpoints or a trainer state, a "
                "warm start's or an RL run's); without it `divrl sft` refuses, as `divrl train` does."})


def _check_script_args(script: SFTScriptArguments) -> None:
    if script.prompt_style not in ("base", "chat"):
        raise ValueError(f"prompt_style must be 'base' or 'chat', got {script.prompt_style!r}")
    if script.hypotheses_per_instance < 1:
        raise ValueError(f"hypotheses_per_instance must be >= 1, got {script.hypotheses_per_instance}")
    if script.n_exemplars < 0:
        raise ValueError(f"n_exemplars must be >= 0, got {script.n_exemplars}")


def parse_recipe(argv: Sequence[str]) -> tuple[SFTScriptArguments, Any, Any]:
    """(script args, SFTConfig, ModelConfig) from `--config RECIPE.yaml` plus command-line overrides."""
    from trl import ModelConfig, SFTConfig

    args, _, recipe, origin = read_command_line(argv)
    parser = recipe_parser((SFTScriptArguments, SFTConfig, ModelConfig), recipe, origin)
    script, sft_args, model_args = parser.parse_args_and_config(args)
    _check_script_args(script)
    return script, sft_args, model_args


def build_trainer(script: SFTScriptArguments, sft_args: Any, model_args: Any) -> Any:
    """Task data, model and LoRA wired into TRL's `SFTTrainer` (loss on the completion tokens only; divrl's
    `WarmStartTrainer` adds the model card), with the held-out recovery callback when recovery_eval is set."""
    from divrl.models import load_model_and_tokenizer, lora_config_from_model_args
    from divrl.trainers.model_card import card_facts
    from divrl.trainers.warm_start import WarmStartTrainer

    task_args = task_args_with_overrides(script)
    task = build_task(script.task, **task_args)
    if not callable(getattr(task, "sft_dataset", None)):
        raise ValueError(f"divrl sft needs a task with warm-start data (an sft_dataset method); task {script.task!r} "
                         "has none")
    check_recovery_eval(task, script)
    dataset = task.sft_dataset(split=script.split, style=script.prompt_style, seed=script.split_seed,
                               limit=script.instance_limit, n_exemplars=script.n_exemplars,
                               per_instance=script.hypotheses_per_instance, sample_seed=script.sample_seed)
    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required (a hub id, a local path or embedded:gemma-3-270m)")
    model, tokenizer = load_model_and_tokenizer(model_args.model_name_or_path, quantize=script.quantize,
                                                dtype=model_args.dtype, revision=model_args.model_revision,
                                                attn_implementation=model_args.attn_implementation,
                                                trust_remote_code=sft_args.trust_remote_code, cpu=sft_args.use_cpu)
    trainer = WarmStartTrainer(model=model, args=sft_args, train_dataset=dataset.remove_columns(
                                   [c for c in dataset.column_names if c not in ("prompt", "completion")]),
                               processing_class=tokenizer, peft_config=lora_config_from_model_args(model_args))
    trainer.card_facts = card_facts(script.task, task_args, getattr(script, "command", None))
    if script.recovery_eval:  # the prompts RL and `divrl eval recovery` will use after this warm start
        held_out = task.train_dataset(split="test", style=script.prompt_style, seed=script.split_seed,
                                      limit=script.instance_limit, n_exemplars=script.n_exemplars)
        add_recovery_eval(trainer, task, script, held_out)
    return trainer


@contextmanager
def labelled_positions_only() -> Iterator[None]:
    """Let TRL's fused LM head project only the positions that carry a label (the completion) on the CPU too.

    TRL scores only labelled positions on Triton devices and every position elsewhere, so that compiling backends
    (Neuron) see fixed tile shapes; on the CPU nothing compiles, and with zero-shot HypoSpace prompts the prompt is
    4-5x the completion, so most of the head's work (about half a step's FLOPs) is thrown away. Same loss, metrics
    and gradients; only which rows enter the projection changes (the kernel itself still picks its CPU path).
    """
    import trl.trainer.utils as trl_utils

    original = trl_utils._use_triton
    trl_utils._use_triton = lambda device: device.type == "cpu" or original(device)
    try:
        yield
    finally:
        trl_utils._use_triton = original


def save_merged(trainer: Any, out: Path) -> Path:
    """Merge the trained LoRA adapter into a fresh unquantized copy of the base the trainer loaded (its path, not the
    portable name the saved adapter records, which may resolve to another revision) and save it (with the
    tokenizer) as a full checkpoint; the trainer's own model is left as it is."""
    base = next(iter(trainer.model.peft_config.values())).base_model_name_or_path
    return merge_adapter(Path(trainer.args.output_dir), out, base=base, dtype=trainer.model.dtype,
                         tokenizer=trainer.processing_class)


def merge_adapter(adapter_dir: Path, out: Path, base: str | None = None, dtype: Any = "auto",
                  tokenizer: Any = None) -> Path:
    """Merge the LoRA adapter saved in `adapter_dir` into an unquantized copy of its base model (`base`: a hub
    id, path or `embedded:NAME`; default the base the adapter recorded, a portable name divrl resolves on any
    machine) and save the result, with `tokenizer` (default: the base's), as a full checkpoint in `out`; this also
    re-merges a saved adapter on a machine that lacks the merged weights."""
    from peft import PeftConfig, PeftModel

    from divrl.models import load_model_and_tokenizer

    base = base or PeftConfig.from_pretrained(str(adapter_dir)).base_model_name_or_path
    model, base_tokenizer = load_model_and_tokenizer(base, quantize="none", dtype=dtype, cpu=True)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(out)
    (tokenizer or base_tokenizer).save_pretrained(out)
    return out


def resume_setting(value: str | bool | None) -> str | bool | None:
    """--resume_from_checkpoint as Trainer.train takes it: 'true'/'false' (any case) as booleans, a path as it is."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Fine-tune, save the adapter in OUTPUT_DIR (and trainer_state.json), and the merged model in OUTPUT_DIR/merged.
    Like `divrl train`, the run holds output_dir's lock throughout and refuses a folder holding a run unless resuming
    a warm start or overwriting (`divrl.train.check_output_dir`), so it never trains over an RL run's checkpoints."""
    from divrl.run_lock import training_run_lock
    from divrl.trainers.checkpoint import save_final

    argv = list(sys.argv[1:] if argv is None else argv)
    script, sft_args, model_args = parse_recipe(argv)
    script.command = recipe_command(argv, "sft")  # for the model card
    if not model_args.use_peft:
        raise ValueError("divrl sft trains a LoRA adapter: set use_peft true (the merged checkpoint comes from it)")
    resume = resume_setting(sft_args.resume_from_checkpoint)
    with training_run_lock(sft_args):
        check_output_dir(sft_args.output_dir, resume, script.overwrite_output_dir, kind="sft")
        trainer = build_trainer(script, sft_args, model_args)
        with labelled_positions_only():
            trainer.train(resume_from_checkpoint=resume or None)
        save_final(trainer, sft_args.output_dir)  # all or nothing: a full disk is one line, nothing partial
        if script.merge and trainer.accelerator.is_main_process:
            out = save_merged(trainer, Path(sft_args.output_dir) / MERGED_SUBDIR)
            print(f"divrl sft: merged model written to {out}; train RL from it with --model_name_or_path {out}")
        trainer.accelerator.wait_for_everyone()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl sft RECIPE.yaml [--field value ...]`."""
    register_recipe_command(subparsers, "sft", main,
                            "Supervised warm start on a task's sft_dataset (TRL SFTTrainer, LoRA), merged for RL.",
                            "recipes/sft/hypospace-voxel.yaml --max_steps 50")


if __name__ == "__main__":
    from divrl.quiet import quiet_console
    from divrl.run_lock import exit_with_error

    quiet_console()
    try:
        sys.exit(main())
    except (ValueError, OSError) as error:  # one line naming the problem, on every rank of a launch alike
        exit_with_error(f"divrl.sft: error: {error}")
