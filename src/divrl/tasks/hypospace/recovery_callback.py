"""Held-out recovery during training: `RecoveryEvalCallback` samples the current policy on held-out instances.

Every `every` optimizer steps (the recipe's `eval_steps`, else `logging_steps`), before training (step 0) and
at the last step, the callback draws `samples` completions for each of the first `instances` held-out rows (the
trainer's `eval_dataset` by default, TRL's convention) from the policy being trained (no reload: the trainer's
own model, adapters and all; a GRPO trainer, or TRL's SFTTrainer for a warm start's curve), reads them with
the task's verifier and logs, through `transformers.Trainer.log`, so they land in `trainer_state.json`'s
`log_history` and in every `report_to` tracker (tensorboard, trackio, ...) at that step:

- `divrl/eval/recovery@n`: order-free recovery RR(n) (`divrl.core.estimators`; mean over instances) at every
  power of two n < N and at n = N (= recovery after all N samples);
- `divrl/eval/validity`, `divrl/eval/uniqueness`, `divrl/eval/vendi_valid`: as in `divrl eval recovery`;
- `divrl/eval/runtime`: seconds the evaluation took.

Why a callback and not TRL's evaluation loop (`eval_strategy="steps"`, GRPOTrainer's `prediction_step`):
that loop generates `num_generations_eval` completions for every prompt of the whole eval set, spread over
batches that it shuffles and scores one batch at a time, and then runs a loss forward pass on them; recovery
needs all N samples of an instance together, and the loss pass is pure cost here. The callback samples only
`instances x samples` sequences, stops at the END marker, and needs no change to the trainers. The two are
independent: a recipe may also set `eval_strategy: steps` to get TRL's `eval_*` metrics (at their own cost).

Side effects kept out of training: sampling runs inside `torch.random.fork_rng` with its own seed (the same
seed at every evaluation: common random numbers, so successive points differ by the policy, not by the dice),
so the training's random stream, and with it resume determinism, is the same with and without evaluation;
every module's train/eval mode and the tokenizer's padding side are restored afterwards. Under several
processes each evaluates its share of the instances and the records are gathered (identical logs on every
rank); under DeepSpeed ZeRO-3 the weights are gathered for generation as TRL does (`ds3_gather_for_generation`).
FSDP is not supported.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from transformers import Trainer, TrainerCallback

EVAL_PREFIX = "divrl/eval/"


def recovery_points(samples: int) -> list[int]:
    """The n at which `divrl/eval/recovery@n` is logged: powers of two below `samples`, then `samples`."""
    return [2**i for i in range(max(samples - 1, 0).bit_length()) if 2**i < samples] + [samples]


def aggregate_records(records: Sequence[dict[str, Any]], samples: int) -> dict[str, float]:
    """Mean over instances of the `score_proposals` records: validity, uniqueness, the Vendi score of the valid
    proposals and RR(n) at `recovery_points`."""
    if not records:
        raise ValueError("no evaluation records to aggregate")
    metrics = {f"{EVAL_PREFIX}recovery@{n}": sum(r["curve_unbiased"][n - 1] for r in records) / len(records)
               for n in recovery_points(samples)}
    for name in ("validity", "uniqueness", "vendi_valid"):
        metrics[f"{EVAL_PREFIX}{name}"] = sum(r[name] for r in records) / len(records)
    return metrics


@contextlib.contextmanager
def _own_random_stream(device: torch.device, seed: int) -> Iterator[None]:
    """Seed torch for sampling, and restore the CPU (and this device's) RNG state on exit."""
    devices = [] if device.type == "cpu" else [device]
    with torch.random.fork_rng(devices=devices, device_type="cuda" if device.type == "cpu" else device.type):
        torch.manual_seed(seed)
        yield


class RecoveryEvalCallback(TrainerCallback):
    """Log held-out recovery of the current policy every `every` steps (see the module docstring).

    Args:
        trainer: the trainer (DivRL/GRPO, or TRL's SFTTrainer: sampling then uses temperature 1, no top-p/top-k
            truncation, and `max_new_tokens` must be given).
        task: reads completions (`outcome_key`); defaults to `trainer.task`.
        dataset: the held-out rows, a `datasets.Dataset` with `prompt` and `hypotheses` (the admissible set H_O)
            columns, as `HypoSpaceTask.train_dataset(split="test")` gives; None = `trainer.eval_dataset`.
        instances: held-out rows evaluated (the first ones; None or 0 = all).
        samples: completions N per instance.
        every: evaluate every this many optimizer steps; None = `args.eval_steps` (a fraction < 1 is a ratio of
            max_steps, as in transformers), else `args.logging_steps`.
        max_new_tokens: None = `args.max_completion_length`.
        batch_size: sequences per `generate` call (None = max(16, samples)).
        seed: sampling seed; None = `args.seed`.
        at_start: also evaluate before the first step (skipped when resuming from a checkpoint).
    """

    def __init__(
        self,
        trainer: Any,
        task: Any = None,
        *,
        dataset: Any = None,
        instances: int | None = 8,
        samples: int = 8,
        every: int | None = None,
        max_new_tokens: int | None = None,
        batch_size: int | None = None,
        seed: int | None = None,
        at_start: bool = True,
    ) -> None:
        from datasets import Dataset

        self.trainer = trainer
        self.task = task if task is not None else getattr(trainer, "task", None)
        if self.task is None or not hasattr(self.task, "outcome_key"):
            raise ValueError("recovery evaluation needs a task with an `outcome_key` hook (a HypoSpace task)")
        dataset = trainer.eval_dataset if dataset is None else dataset
        if not isinstance(dataset, Dataset):
            raise ValueError("recovery evaluation needs the held-out split as its dataset or the trainer's "
                             f"eval_dataset (a datasets.Dataset), got {type(dataset).__name__}")
        missing = {"prompt", "hypotheses"} - set(dataset.column_names)
        if missing:
            raise ValueError(f"recovery evaluation needs held-out columns {sorted(missing)} (prompt and the "
                             "admissible set 'hypotheses', as HypoSpace datasets have)")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"recovery evaluation samples must be an integer >= 1, got {samples!r}")
        if instances is not None and instances < 0:
            raise ValueError(f"recovery evaluation instances must be >= 0 (0 = all), got {instances}")
        if every is not None and every < 1:
            raise ValueError(f"recovery evaluation interval must be >= 1 step, got {every}")
        max_new_tokens = max_new_tokens or getattr(trainer.args, "max_completion_length", None)
        if not max_new_tokens:
            raise ValueError("recovery evaluation needs a token limit: this trainer's args have no "
                             "max_completion_length (SFT); set max_new_tokens (recipes: recovery_eval_max_new_tokens)")
        if getattr(trainer, "is_fsdp_enabled", False):
            raise ValueError("recovery evaluation during training is not supported under FSDP")
        count = len(dataset) if not instances else min(instances, len(dataset))
        self.rows = [dataset[i] for i in range(count)]
        self.samples = samples
        self.every = every
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size or max(16, samples)
        self.seed = seed
        self.at_start = at_start
        self.history: list[tuple[int, dict[str, float]]] = []

    # ------------------------------------------------------------------------------------------ schedule
    def interval(self, args: Any, max_steps: int) -> int:
        """Steps between evaluations: `every`, else eval_steps (a fraction of max_steps when < 1), else
        logging_steps."""
        if self.every is not None:
            return self.every
        steps = args.eval_steps if args.eval_steps else args.logging_steps
        if steps < 1:
            steps = math.ceil(max_steps * steps)
        return max(int(steps), 1)

    def on_train_begin(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
        if self.at_start and state.global_step == 0:
            self.evaluate()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: D102 (TrainerCallback hook)
        step = state.global_step
        if step % self.interval(args, state.max_steps) == 0 or step == state.max_steps:
            self.evaluate()

    # ------------------------------------------------------------------------------------------ evaluation
    def evaluate(self) -> dict[str, float]:
        """Sample, score and log now; returns the logged metrics."""
        from accelerate.utils import gather_object

        trainer = self.trainer
        start = time.perf_counter()
        accelerator = trainer.accelerator
        mine = self.rows[accelerator.process_index :: accelerator.num_processes]
        records = self._sample_and_score(mine)
        if accelerator.num_processes > 1:
            records = gather_object(records)
        metrics = aggregate_records(records, self.samples)
        metrics[f"{EVAL_PREFIX}runtime"] = time.perf_counter() - start
        # transformers' own `log`: GRPOTrainer.log would also flush (and reset) its buffer of training metrics.
        # Its `on_log` event clears control.should_log, which would drop this step's regular training log.
        should_log = trainer.control.should_log
        Trainer.log(trainer, dict(metrics))
        trainer.control.should_log = trainer.control.should_log or should_log
        self.history.append((trainer.state.global_step, metrics))
        return metrics

    def _sampling_config(self) -> Any:
        from divrl.sampling import SamplingConfig

        args = self.trainer.args
        return SamplingConfig(
            max_new_tokens=self.max_new_tokens,
            temperature=getattr(args, "temperature", 1.0),  # SFTConfig has no sampling settings: plain sampling
            top_p=getattr(args, "top_p", 1.0),
            top_k=getattr(args, "top_k", None) or 0,
            batch_size=self.batch_size,
            seed=args.seed if self.seed is None else self.seed,
            stop=tuple(getattr(self.task, "stop_strings", ())),  # as `divrl eval recovery`: the answer ends at END
        )

    def _prompts(self, tokenizer: Any, rows: Sequence[dict[str, Any]]) -> list[Any]:
        """Row prompts; chat prompts are rendered here when the recipe passes `chat_template_kwargs`."""
        kwargs = getattr(self.trainer.args, "chat_template_kwargs", None) or {}
        prompts = [row["prompt"] for row in rows]
        if not kwargs:
            return prompts
        rendered = []
        for prompt in prompts:
            if isinstance(prompt, str):
                rendered.append(prompt)
                continue
            text = tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True, **kwargs)
            bos = tokenizer.bos_token
            if bos and text.startswith(bos) and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]:
                text = text[len(bos):]  # the sampler tokenizes text with special tokens: no second BOS
            rendered.append(text)
        return rendered

    def _sample_and_score(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        from trl.models import unwrap_model_for_generation

        from divrl.sampling import TransformersSampler
        from divrl.tasks.hypospace.metrics import score_proposals

        trainer, args = self.trainer, self.trainer.args
        processing = trainer.processing_class
        tokenizer = getattr(processing, "tokenizer", processing)
        config = self._sampling_config()
        padding_side = tokenizer.padding_side
        with unwrap_model_for_generation(
            trainer.model_wrapped,
            trainer.accelerator,
            gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True),
            gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs,
        ) as model:
            modes = [(module, module.training) for module in model.modules()]
            model.eval()
            try:
                completions: list[list[str]] = []
                if rows:
                    with _own_random_stream(trainer.accelerator.device, config.seed):
                        sampler = TransformersSampler(model, tokenizer, config)
                        completions = sampler(self._prompts(tokenizer, rows), self.samples)
            finally:
                for module, training in modes:
                    module.training = training
                tokenizer.padding_side = padding_side
        records = []
        for row, texts in zip(rows, completions, strict=True):
            proposals = [self.task.outcome_key(text) for text in texts]
            records.append(score_proposals(proposals, frozenset(row["hypotheses"])))
        return records
