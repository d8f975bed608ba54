"""Completions that end at a stop string, on every generation backend, with nothing after it in the loss.

A base-model prompt ends each worked example with a marker (HypoSpace: an `END` line); the model goes on past
it into invented examples that the task never reads. `StopStrings` makes a completion end at the first
stop string, the way TRL ends one at EOS (`StopStrings`, which `DivRLTrainer` installs):

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

from divrl.backends.cpu import patch_attribute

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


class StopStrings:
    """Completions that end at the first of `stops` (see the module docstring): `patches` adds the stop criterion
    to transformers' `generate` (vLLM gets `stop` through `generation_kwargs`: `vllm_stop_kwargs`), `cut` ends each
    completion returned by any backend after its first stop string."""

    def __init__(self, stops: tuple[str, ...], tokenizer: Any, use_vllm: bool) -> None:
        self.stops = stops
        self.tokenizer = tokenizer
        self.use_vllm = use_vllm

    def patches(self, causal_lm: Any) -> list[Callable[[], None]]:
        """The stop criterion for transformers' `generate` and how to undo it (none for vLLM, or without stops)."""
        if not self.stops or self.use_vllm:
            return []
        return [add_stop_criterion(causal_lm, self.tokenizer, self.stops)]

    def cut(self, completion_ids: list[list[int]], logprobs: list | None
            ) -> tuple[list[list[int]], list | None, list[int | None]]:
        """Each completion (and its sampler log-probs) cut after its first stop string, and the cut lengths (None:
        no stop string in it)."""
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
        lengths = [stop_length(ids, decode, self.stops) for ids in completion_ids]
        completion_ids = [ids if k is None else ids[:k] for ids, k in zip(completion_ids, lengths, strict=True)]
        if logprobs is not None:
            logprobs = [lp if k is None else lp[:k] for lp, k in zip(logprobs, lengths, strict=True)]
        return completion_ids, logprobs, lengths


def log_stop_metrics(accelerator: Any, metrics: dict[str, list[float]], completion_ids: list[list[int]],
                     lengths: list[int | None]) -> None:
    """Log `divrl/stop/ratio` (completions ended by a stop string) and `divrl/stop/mean_length_unstopped` (their
    mean token count as returned by the backend, before the cut: what would enter the loss without it), global
    over processes; TRL's `completions/mean_length` is the length after the cut."""
    stopped = torch.tensor([k is not None for k in lengths], dtype=torch.float32, device=accelerator.device)
    unstopped = torch.tensor([len(ids) for ids in completion_ids], dtype=torch.float32, device=accelerator.device)
    metrics["divrl/stop/ratio"].append(accelerator.gather(stopped).mean().item())
    metrics["divrl/stop/mean_length_unstopped"].append(accelerator.gather(unstopped).mean().item())
