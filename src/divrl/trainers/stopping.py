"""Completions that end at a stop string, on every generation backend, with nothing after it in the loss.

A base-model prompt ends each worked example with a marker (HypoSpace: an `END` line); the model goes on past
it into invented examples that the task never reads. `StopStringsMixin` makes a completion end at the first
stop string, the way TRL ends one at EOS:

- generation stops there: transformers' `generate` gets a `StopStringCriterion` (`add_stop_criterion`), vLLM gets
  `stop` in its `SamplingParams` (`generation_kwargs`, colocate and server mode); the rows of a batch stop one
  by one and the batch ends when every row has stopped or reached `max_completion_length`. (transformers'
  continuous-batching `generate_batch` gets no stop and runs on; the cut below still applies.)
- whatever the backend returned, each completion's token ids are cut after the token that completes the first
  stop string (`stop_length`), before TRL builds `completion_mask`, so the tokens after it are masked out of
  the loss exactly as TRL masks tokens after EOS, and the reward functions see the text up to and including the
  stop string.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from divrl.trainers.cpu_fast import patch_attribute

_STOP_MARKER = "_divrl_stop_criterion"


def stop_length(ids: Sequence[int], decode: Callable[[Sequence[int]], str], stops: Sequence[str]) -> int | None:
    """The number of leading tokens of `ids` whose text first contains a stop string, or None if it never does.

    Binary search over prefixes (a prefix's text is a prefix of the longer one's): O(log n) decodes."""
    contains = lambda k: any(stop in decode(ids[:k]) for stop in stops)  # noqa: E731
    if not stops or not contains(len(ids)):
        return None
    low, high = 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        if contains(middle):
            high = middle
        else:
            low = middle + 1
    return low


class StopStringCriterion:
    """A transformers stopping criterion: done for each row whose generated text contains a stop string.

    It decodes only the last few tokens of each row (enough to hold any stop string) at every step, so a step
    costs a few short decodes. transformers' own `StopStringCriteria` preprocesses the whole vocabulary when it is
    built, at every `generate` call: seconds for Gemma's 262k tokens."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, tuple(stops)
        self.window = 4 * max(len(stop) for stop in self.stops) + 4  # tokens: a byte-level token holds >= 1/4 char
        self.prompt_length: int | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        if self.prompt_length is None:  # first call: one token generated
            self.prompt_length = input_ids.shape[1] - 1
        tails = input_ids[:, max(self.prompt_length, input_ids.shape[1] - self.window) :]
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        return torch.tensor([any(stop in text for stop in self.stops) for text in texts], device=input_ids.device)


def add_stop_criterion(causal_lm: Any, tokenizer: Any, stops: Sequence[str]) -> Callable[[], None]:
    """Make every `causal_lm.generate` call stop each row at `stops` (a fresh `StopStringCriterion` per call,
    after any criteria the caller passed); returns how to undo it."""
    from transformers import StoppingCriteriaList

    if getattr(causal_lm, _STOP_MARKER, False):
        return lambda: None
    previous_generate = causal_lm.generate

    @functools.wraps(previous_generate)
    def generate_with_stops(*args: Any, **kwargs: Any) -> Any:
        criteria = StoppingCriteriaList(kwargs.get("stopping_criteria") or [])
        criteria.append(StopStringCriterion(tokenizer, stops))
        return previous_generate(*args, **{**kwargs, "stopping_criteria": criteria})

    return patch_attribute(causal_lm, "generate", generate_with_stops, _STOP_MARKER)


def resolve_stop_strings(args: Any, task: Any) -> tuple[str, ...]:
    """The run's stop strings: `args.stop_strings` when set, else the task's `stop_strings` attribute, else none.
    Refuses `mask_truncated_completions`, which TRL decides by EOS alone."""
    stops = args.stop_strings if args.stop_strings is not None else getattr(task, "stop_strings", ())
    stops = tuple(stops or ())
    if stops and args.mask_truncated_completions:
        raise ValueError(
            f"DivRLConfig.stop_strings {list(stops)} and mask_truncated_completions=True cannot be combined: TRL "
            "counts a completion as truncated unless it ends in EOS, so every completion ended by a stop string "
            "would be masked out. Set stop_strings: [] or mask_truncated_completions: false."
        )
    return stops


def vllm_stop_kwargs(generation_kwargs: dict[str, Any] | None, stops: Sequence[str]) -> dict[str, Any]:
    """`generation_kwargs` with `stops` added to vLLM's `stop` list (kept with any the user set there)."""
    kwargs = dict(generation_kwargs or {})
    existing = kwargs.get("stop") or []
    existing = [existing] if isinstance(existing, str) else list(existing)
    kwargs["stop"] = existing + [s for s in stops if s not in existing]
    return kwargs


class StopStringsMixin:
    """Mixin for `trl.GRPOTrainer` subclasses, listed before `CPUFastLogpsMixin`: completions end at the first of
    `self.stop_strings` (see the module docstring). The subclass sets `self.stop_strings` (empty: off) and, for
    vLLM, puts them into `args.generation_kwargs` (`vllm_stop_kwargs`) before GRPOTrainer's constructor runs."""

    stop_strings: tuple[str, ...] = ()

    def _install_model_patches(self, causal_lm: Any) -> list[Callable[[], None]]:
        """The parent's patches, plus the stop criterion for transformers' `generate` (vLLM takes `stop` itself)."""
        patches = super()._install_model_patches(causal_lm)  # type: ignore[misc]
        if self.stop_strings and not self.args.use_vllm:  # type: ignore[attr-defined]
            patches.append(add_stop_criterion(causal_lm, self._tokenizer, self.stop_strings))  # type: ignore[attr-defined]
        return patches

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):  # noqa: D102 (TRL hook)
        completion_ids, logprobs = super()._generate_single_turn(  # type: ignore[misc]
            prompt_ids, images, multimodal_fields, num_generations, has_tool_images
        )
        if not self.stop_strings:
            return completion_ids, logprobs
        decode = functools.partial(self._tokenizer.decode, skip_special_tokens=True)  # type: ignore[attr-defined]
        lengths = [stop_length(ids, decode, self.stop_strings) for ids in completion_ids]
        self._record_stop_metrics(completion_ids, lengths)
        completion_ids = [ids if k is None else ids[:k] for ids, k in zip(completion_ids, lengths, strict=True)]
        if logprobs is not None:
            logprobs = [lp if k is None else lp[:k] for lp, k in zip(logprobs, lengths, strict=True)]
        return completion_ids, logprobs

    def _record_stop_metrics(self, completion_ids: list[list[int]], lengths: list[int | None]) -> None:
        """Log `divrl/stop/ratio` (completions ended by a stop string) and `divrl/stop/mean_length_unstopped`
        (their mean token count as returned by the backend, before the cut: what would enter the loss without
        it), global over processes; TRL's `completions/mean_length` is the length after the cut."""
        accelerator = self.accelerator  # type: ignore[attr-defined]
        stopped = torch.tensor([k is not None for k in lengths], dtype=torch.float32, device=accelerator.device)
        unstopped = torch.tensor([len(ids) for ids in completion_ids], dtype=torch.float32, device=accelerator.device)
        mode = "train" if self.model.training else "eval"  # type: ignore[attr-defined]
        metrics = self._metrics[mode]  # type: ignore[attr-defined]
        metrics["divrl/stop/ratio"].append(accelerator.gather(stopped).mean().item())
        metrics["divrl/stop/mean_length_unstopped"].append(accelerator.gather(unstopped).mean().item())
