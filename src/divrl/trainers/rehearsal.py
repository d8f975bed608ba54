"""Sampling rehearsal sets for the divergence estimator on reference samples (DPH-RL, the DPH-RL paper).

`sample_reference` draws completions from the reference (initial) policy once and stores them with the
reference's per-token log-probs; during training the divergence is then estimated on these samples (read back by
`divrl.methods.rehearsal.RehearsalSet`) with only the policy's log-probs (no reference model, no extra generation).
Log-probs come from TRL's fused LM head at the sampling temperature, the same kernel and temperature the trainer
uses for the policy.

As published, DPH-RL scores the reference samples and splits the prompts: those the initial policy solves in
all k samples form the rehearsal set (the divergence keeps what the model already knows, on its correct
samples only), the others the exploration set that RL trains on (`exploration_prompts` here, `train_prompts`
in `divrl train`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from divrl.methods.rehearsal import META_FILE, pad_prompt_completion

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EXPLORATION_FILE = "exploration.jsonl"  # prompts not solved in every reference sample (DPH-RL's exploration set)


def tokenize_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str | list[dict[str, Any]]) -> list[int]:
    """Token ids of a prompt exactly as TRL's GRPOTrainer builds them (chat template for conversations)."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        out = tokenizer.apply_chat_template(
            conversation=[prompt], add_generation_prompt=True, tokenize=True, return_dict=True
        )
        return list(out["input_ids"][0])
    raise ValueError(f"a prompt must be a string or a list of chat messages, got {type(prompt).__name__}")


@torch.no_grad()
def fused_completion_logps(
    model: PreTrainedModel, batch: dict[str, torch.Tensor], temperature: float
) -> torch.Tensor:
    """Per-token log-probs of the completion tokens under `model` at `temperature` (TRL's fused LM head)."""
    from trl.trainer.utils import add_fused_lm_head

    if not getattr(model, "_divrl_fused_head", False):
        add_fused_lm_head(model, temperature=temperature)
        model._divrl_fused_head = True
    logits_to_keep = batch["completion_mask"].shape[1]
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    labels[:, :-logits_to_keep] = -100
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels,
                fused_lm_head=True)
    return out.log_probs[:, -logits_to_keep:] * batch["completion_mask"]


def _truncate_at_eos(ids: list[int], eos_ids: set[int]) -> list[int]:
    """Completion ids up to and including the first end-of-sequence token (as TRL does)."""
    for i, token in enumerate(ids):
        if token in eos_ids:
            return ids[: i + 1]
    return ids


def sample_reference(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str | list[dict[str, Any]]],
    out_dir: str | Path,
    num_samples: int = 4,
    max_new_tokens: int = 128,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    batch_size: int = 8,
    seed: int = 0,
    stop_strings: Sequence[str] = (),
    score: Callable[[int, str], float] | None = None,
    correct_only: bool = False,
    split: bool = False,
) -> Path:
    """Sample `num_samples` completions per prompt from `model` and save them with their log-probs.

    Train with the same `temperature` (DivRLConfig.temperature): the stored log-probs are those of the
    tempered distribution, and the trainer refuses a rehearsal set sampled at another temperature.
    Completions end at EOS or at the first of `stop_strings` (as training generation does). With `score`
    (prompt index, completion text) -> reward, a sample is correct when it scores > 0: `correct_only` keeps only
    correct samples; `split` (DPH-RL) keeps only the samples of prompts solved in all `num_samples` and writes the
    other prompts to EXPLORATION_FILE, one {"prompt": ...} per line.
    """
    from datasets import Dataset

    from divrl.backends.stop_strings import stop_length

    if (correct_only or split) and score is None:
        raise ValueError("keeping only correct samples or splitting the prompts needs a score function (a task)")

    if num_samples < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError("num_samples, max_new_tokens and batch_size must all be >= 1")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not prompts:
        raise ValueError("no prompts to sample from")
    torch.manual_seed(seed)
    model.eval()
    device = next(model.parameters()).device
    eos_ids = {tokenizer.eos_token_id, *_as_list(model.generation_config.eos_token_id)} - {None}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows: dict[str, list] = {"prompt": [], "prompt_ids": [], "completion_ids": [], "ref_logps": [], "reward": [],
                             "prompt_index": []}
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
    jobs = [(i, p, tokenize_prompt(tokenizer, p)) for i, p in enumerate(prompts) for _ in range(num_samples)]
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        prompt_ids = [ids for _, _, ids in chunk]
        padded = pad_prompt_completion(prompt_ids, [[] for _ in chunk], pad_id)
        prompt_len = padded["input_ids"].shape[1]
        generated = model.generate(
            input_ids=padded["input_ids"].to(device), attention_mask=padded["attention_mask"].to(device),
            do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens,
            pad_token_id=pad_id,
        )
        completions = [_truncate_at_eos(row.tolist(), eos_ids) for row in generated[:, prompt_len:].cpu()]
        cuts = [stop_length(ids, decode, stop_strings) for ids in completions]
        completions = [ids if cut is None else ids[:cut] for ids, cut in zip(completions, cuts, strict=True)]
        batch = {k: v.to(device) for k, v in pad_prompt_completion(prompt_ids, completions, pad_id).items()}
        logps = fused_completion_logps(model, batch, temperature).cpu()
        for (index, prompt, ids), completion, row_logps in zip(chunk, completions, logps, strict=True):
            rows["prompt"].append(json.dumps(prompt))
            rows["prompt_index"].append(index)
            rows["prompt_ids"].append(ids)
            rows["completion_ids"].append(completion)
            rows["ref_logps"].append(row_logps[: len(completion)].tolist())
            rows["reward"].append(math.nan if score is None else float(score(index, decode(completion))))
    keep, solved = _kept_rows(rows, len(prompts), num_samples, correct_only, split)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if split:
        (out / EXPLORATION_FILE).write_text("".join(json.dumps({"prompt": p}) + "\n"
                                                    for i, p in enumerate(prompts) if i not in solved))
    Dataset.from_dict({k: [v[i] for i in keep] for k, v in rows.items()}).save_to_disk(str(out))
    meta = {"temperature": temperature, "num_prompts": len(prompts), "num_samples": num_samples,
            "max_new_tokens": max_new_tokens, "model": getattr(model.config, "_name_or_path", ""),
            "vocab_size": model.config.get_text_config().vocab_size, "stop_strings": list(stop_strings),
            "correct_only": correct_only or split, "split": split, "rows": len(keep),
            "rehearsal_prompts": len(solved) if split else None}
    (out / META_FILE).write_text(json.dumps(meta, indent=2))
    return out


def _kept_rows(rows: dict[str, list], num_prompts: int, num_samples: int, correct_only: bool, split: bool
               ) -> tuple[list[int], set[int]]:
    """Indices of the rows to store and the prompts solved in every sample (DPH-RL's rehearsal prompts)."""
    correct = [reward > 0 for reward in rows["reward"]]  # NaN (unscored) > 0 is False
    per_prompt = [0] * num_prompts
    for index, ok in zip(rows["prompt_index"], correct, strict=True):
        per_prompt[index] += ok
    solved = {i for i, count in enumerate(per_prompt) if count == num_samples}
    if split and not solved:
        raise ValueError(f"no prompt was solved in all {num_samples} reference samples, so DPH-RL's rehearsal set "
                         "would be empty: sample fewer per prompt (--num-samples), or keep the correct samples of "
                         "every prompt without splitting (--correct-only)")
    if split:
        return [r for r, i in enumerate(rows["prompt_index"]) if i in solved], solved
    if correct_only:
        keep = [r for r, ok in enumerate(correct) if ok]
        if not keep:
            raise ValueError("no reference sample is correct: the rehearsal set would be empty")
        return keep, solved
    return list(range(len(rows["reward"]))), solved


def _as_list(value: Any) -> list:
    return [] if value is None else list(value) if isinstance(value, list | tuple) else [value]
