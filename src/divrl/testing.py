"""Tiny random causal LMs and a locally trained tokenizer, saved like hub checkpoints, and a toy task with every
hook, for checks that training runs (the test suite, `divrl doctor`).

Used by the test suite, `--dry-run` modes, `divrl doctor` and benchmarks: nothing here touches a model hub, and the
saved directory loads with `AutoModelForCausalLM.from_pretrained(path)` and
`AutoTokenizer.from_pretrained(path)`.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ARCHITECTURES = ("qwen3", "gemma3")

# ChatML, the format Qwen models use; works for any architecture since the special tokens are ours.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _training_corpus() -> list[str]:
    """A small deterministic corpus covering letters, digits, arithmetic, SMILES-like strings and prose."""
    words = (
        "the answer is a number solve this problem think step by step hypothesis molecule ring carbon "
        "oxygen nitrogen because therefore final result question reason idea diverse many one two three"
    ).split()
    lines = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    lines += [f"{a} + {b} = {a + b}" for a in range(20) for b in range(0, 20, 3)]
    lines += ["CCO c1ccccc1 CC(=O)O N#N C1CCCCC1 O=C=O CC(C)N [NH4+] Cl Br F", string.printable]
    return lines


def build_tokenizer(out_dir: str | Path, vocab_size: int = 512) -> Path:
    """Train a byte-level BPE tokenizer with a ChatML template and save it (fast tokenizer) to `out_dir`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_training_corpus(), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )
    out = Path(out_dir)
    wrapped.save_pretrained(out)
    return out


def _model_config(arch: str, vocab_size: int, hidden_size: int, num_layers: int, pad_id: int, eos_id: int):
    """A transformers config of the given architecture, scaled down to `hidden_size` x `num_layers`."""
    heads = max(2, hidden_size // 64)
    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        head_dim=hidden_size // heads,
        max_position_embeddings=2048,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    if arch == "qwen3":
        from transformers import Qwen3Config

        return Qwen3Config(**common)
    if arch == "gemma3":
        from transformers import Gemma3TextConfig

        return Gemma3TextConfig(**common, sliding_window=64, query_pre_attn_scalar=hidden_size // heads)
    raise ValueError(f"unknown architecture {arch!r}; choose one of {ARCHITECTURES}")


VLM_ARCHITECTURES = ("gemma3", "llava")
# ChatML whose messages may hold content parts: an image part becomes the processor's image placeholder.
MULTIMODAL_CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}IMAGE{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_vlm(arch: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Save a randomly initialised vision-language model with its processor to `out_dir` and return the path: `gemma3`
    (Gemma3ForConditionalGeneration: SigLIP tower, 4 image tokens per 28x28 image) or `llava` (LlavaForConditional-
    Generation on a tiny Qwen3 and a SigLIP tower). Loads like a hub checkpoint with `AutoProcessor` and
    `AutoModelForImageTextToText`, offline."""
    import torch
    from transformers import (
        AutoModelForImageTextToText,
        AutoTokenizer,
        PreTrainedTokenizerFast,
        SiglipVisionConfig,
    )

    if arch not in VLM_ARCHITECTURES:
        raise ValueError(f"unknown vision-language architecture {arch!r}; choose one of {VLM_ARCHITECTURES}")
    out = Path(out_dir)
    build_tokenizer(out / "text-tokenizer")
    text_tokenizer = AutoTokenizer.from_pretrained(out / "text-tokenizer")
    specials = ({"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"}
                if arch == "gemma3" else {"image_token": "<image>"})
    text_tokenizer.add_special_tokens({"additional_special_tokens": list(specials.values())})
    placeholder = specials["boi_token"] if arch == "gemma3" else specials["image_token"]
    template = MULTIMODAL_CHATML_TEMPLATE.replace("IMAGE", placeholder)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=text_tokenizer.backend_tokenizer, eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", chat_template=template,
                                        extra_special_tokens=specials)
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in specials.items()}
    text = _model_config("gemma3" if arch == "gemma3" else "qwen3", len(tokenizer), 32, 2, tokenizer.pad_token_id,
                         tokenizer.eos_token_id)
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=28, patch_size=14)
    if arch == "gemma3":
        from transformers import Gemma3Config, Gemma3ImageProcessorPil, Gemma3Processor

        config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                              boi_token_index=ids["boi_token"], eoi_token_index=ids["eoi_token"],
                              image_token_index=ids["image_token"])
        processor = Gemma3Processor(image_processor=Gemma3ImageProcessorPil(size={"height": 28, "width": 28}),
                                    tokenizer=tokenizer, chat_template=template, image_seq_length=4)
    else:
        from transformers import LlavaConfig, LlavaProcessor, SiglipImageProcessorPil

        config = LlavaConfig(text_config=text, vision_config=vision, image_token_index=ids["image_token"],
                             vision_feature_select_strategy="full", vision_feature_layer=-1)
        processor = LlavaProcessor(image_processor=SiglipImageProcessorPil(size={"height": 28, "width": 28}),
                                   tokenizer=tokenizer, patch_size=14, vision_feature_select_strategy="full",
                                   chat_template=template)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
    return out


def build_tiny_model(
    arch: str,
    out_dir: str | Path,
    hidden_size: int = 32,
    num_layers: int = 2,
    vocab_size: int = 512,
    seed: int = 0,
) -> Path:
    """Save a randomly initialised `arch` causal LM plus the local tokenizer to `out_dir` and return the path.

    The directory loads exactly like a hub checkpoint; `seed` fixes the weights.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {arch!r}; choose one of {ARCHITECTURES}")
    out = Path(out_dir)
    build_tokenizer(out, vocab_size=vocab_size)
    tokenizer = AutoTokenizer.from_pretrained(out)
    config = _model_config(
        arch, len(tokenizer), hidden_size, num_layers, tokenizer.pad_token_id, tokenizer.eos_token_id
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    return out


def build_tiny_clm(out_dir: str | Path, hidden_size: int = 32, num_layers: int = 2, seed: int = 0) -> Path:
    """Save a randomly initialised chemical LM shaped like `embedded:smiles-clm` (Llama over the atom-level SMILES
    tokenizer, vocabulary from the SMILES shipped with RDKit) to `out_dir`: dry runs and tests of the `clm` prompt
    style without the shipped weights."""
    import dataclasses

    import torch
    from transformers import LlamaForCausalLM

    from divrl.tasks.molecules.data import SHIPPED_SMILES, shipped_smiles
    from divrl.tasks.molecules.pretrain import PretrainConfig, model_config
    from divrl.tasks.molecules.smiles_tokenizer import build_smiles_tokenizer, vocabulary

    corpus = [smiles for source in SHIPPED_SMILES for smiles in shipped_smiles(source)]
    tokenizer = build_smiles_tokenizer(vocabulary(corpus))
    shape = dataclasses.replace(PretrainConfig(), hidden=hidden_size, layers=num_layers, heads=2,
                                intermediate=2 * hidden_size)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(model_config(shape, tokenizer))
    model.generation_config.update(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                   pad_token_id=tokenizer.pad_token_id)
    out = Path(out_dir)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@contextmanager
def scripted_generation(tokenizer: Any, script: Callable[[str, int], str]) -> Iterator[None]:
    """Patch `GenerationMixin.generate`: prompt row i of a call gets the completion `script(prompt_text, row)`.

    `row` is the row's index in the global batch (this process's rows follow those of lower ranks), so the
    same script yields the same global batch under any number of processes. Completions are tokenized,
    end with EOS and are cut at the call's `max_new_tokens`, so exact expected values can be computed. With
    `num_return_sequences` n, each prompt row is repeated n times first, as `generate` does.
    """
    from unittest.mock import patch

    import torch
    from accelerate import PartialState
    from transformers import GenerationMixin

    def generate(self: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any):
        config = kwargs.get("generation_config")
        max_new = getattr(config, "max_new_tokens", None) or kwargs.get("max_new_tokens") or 10**6
        repeats = kwargs.get("num_return_sequences") or getattr(config, "num_return_sequences", None) or 1
        input_ids = input_ids.repeat_interleave(repeats, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(repeats, dim=0)
        offset = PartialState().process_index * input_ids.shape[0]
        completions = []
        for i, row in enumerate(input_ids):
            prompt = row if attention_mask is None else row[attention_mask[i].bool()]
            text = script(tokenizer.decode(prompt), offset + i)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            completions.append(ids[:max_new])
        width = max(len(c) for c in completions)
        padded = [c + [tokenizer.pad_token_id] * (width - len(c)) for c in completions]
        return torch.cat([input_ids, torch.tensor(padded, dtype=input_ids.dtype, device=input_ids.device)], dim=1)

    with patch.object(GenerationMixin, "generate", generate):
        yield


def text_of(completion: Any) -> str:
    """A completion's text (the last message's content for chat completions)."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def distinct_chars_reward(completions: list, **_: Any) -> list[float]:
    """Varies between random completions (a group-constant reward would give zero advantages)."""
    return [float(len(set(text_of(c)))) for c in completions]


class ToyTask:
    """A task with every optional hook (IPS outcome, QD behaviour, novelty embedding), computed from the completion
    text, so that every method has what it reads on a tiny random model."""

    name = "toy"
    behavior_dims = 2

    def reward_funcs(self) -> list:
        return [distinct_chars_reward]

    def outcome_key(self, completion: str, **row: Any) -> str | None:
        return completion[:1] or None

    def behavior(self, completion: str, **row: Any) -> list[float] | None:
        if not completion:
            return None
        return [min(len(set(completion)) / 10, 1.0), sum(c in "aeiou" for c in completion) / len(completion)]

    def embed(self, completion: str, **row: Any) -> list[float]:
        return [float(len(completion)), float(len(set(completion)))]
