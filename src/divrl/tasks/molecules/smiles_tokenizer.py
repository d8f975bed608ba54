"""An atom-level SMILES tokenizer as a Hugging Face `PreTrainedTokenizerFast`, for chemical language models.

Tokens follow the Molecular Transformer's regex (Schwaller et al., 2019): bracket atoms, the two-letter halogens
Br and Cl, aromatic atoms, bonds, branches, ring-closure digits and `%nn`. The vocabulary is the set of tokens in a
training corpus plus four special tokens; decoding concatenates tokens, so a SMILES round-trips exactly when
`tokenize` finds every piece in the vocabulary (`check_round_trip`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

SMILES_PATTERN = (
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|\%[0-9]{2}|[0-9])"
)
SMILES_REGEX = re.compile(SMILES_PATTERN)
BOS, EOS, PAD, UNK = "[BOS]", "[EOS]", "[PAD]", "[UNK]"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)  # ids 0-3, in this order


def split_smiles(smiles: str) -> list[str]:
    """The regex tokens of `smiles`; ValueError when they do not cover the string (a character no rule matches)."""
    tokens = SMILES_REGEX.findall(smiles)
    if "".join(tokens) != smiles:
        raise ValueError(f"SMILES {smiles!r} has characters outside the atom-level SMILES grammar")
    return tokens


def vocabulary(corpus: Iterable[str]) -> list[str]:
    """Special tokens, then every token of `corpus` by descending count (ties by string): deterministic."""
    counts: Counter[str] = Counter()
    for smiles in corpus:
        counts.update(split_smiles(smiles))
    return list(SPECIAL_TOKENS) + sorted(counts, key=lambda token: (-counts[token], token))


def build_smiles_tokenizer(tokens: Iterable[str], model_max_length: int = 128) -> PreTrainedTokenizerFast:
    """A fast tokenizer over `tokens` (the first four must be `SPECIAL_TOKENS`) that puts BOS before each encoded
    SMILES and decodes by plain concatenation."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    tokens = list(tokens)
    if tuple(tokens[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(f"the vocabulary must start with the special tokens {SPECIAL_TOKENS}")
    if len(set(tokens)) != len(tokens):
        raise ValueError("the vocabulary repeats a token")
    vocab = {token: index for index, token in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(SMILES_PATTERN), behavior="isolated")
    core.decoder = decoders.Fuse()
    # BOS alone, as Llama's tokenizers: an empty prompt is then [BOS], where generation starts (TRL tokenizes prompts
    # with special tokens); pretraining appends EOS itself.
    core.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=model_max_length,
        padding_side="left",  # generation pads prompts on the left; TRL re-pads completions itself
        clean_up_tokenization_spaces=False,
    )


def check_round_trip(tokenizer: PreTrainedTokenizerFast, corpus: Iterable[str], batch_size: int = 4096) -> int:
    """Encode and decode every SMILES of `corpus`; ValueError naming the first that does not come back exactly
    (or that meets the unknown token). Returns how many were checked."""
    checked = 0
    batch: list[str] = []

    def flush() -> None:
        backend = tokenizer.backend_tokenizer  # the Rust tokenizer: transformers' batch_decode is ~10x slower
        encoded = [encoding.ids for encoding in backend.encode_batch(batch, add_special_tokens=True)]
        decoded_batch = backend.decode_batch(encoded, skip_special_tokens=True)
        for smiles, ids, decoded in zip(batch, encoded, decoded_batch, strict=True):
            if tokenizer.unk_token_id in ids:
                raise ValueError(f"SMILES {smiles!r} meets the unknown token")
            if decoded != smiles:
                raise ValueError(f"SMILES {smiles!r} decodes as {decoded!r}")

    for smiles in corpus:
        batch.append(smiles)
        if len(batch) == batch_size:
            flush()
            checked += len(batch)
            batch = []
    if batch:
        flush()
        checked += len(batch)
    return checked
