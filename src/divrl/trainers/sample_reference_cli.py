"""`divrl sample-reference`: pre-sample a rehearsal set from the reference (initial) policy (seed 004).

The set feeds `DivRLConfig(divergence=..., divergence_estimator="rehearsal", divergence_rehearsal_path=DIR)`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def read_prompts(path: Path, column: str) -> list[Any]:
    """Prompts from a JSONL file (one object per line holding `column`: a string or a list of chat messages)."""
    if not path.is_file():
        raise ValueError(f"prompts file {str(path)!r} does not exist")
    prompts = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or column not in record:
            raise ValueError(f"{path}:{number}: expected an object with a {column!r} field")
        prompts.append(record[column])
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts


def register(subparsers: Any) -> None:
    """Add `divrl sample-reference --model M --prompts FILE --out DIR [...]`."""
    parser = subparsers.add_parser(
        "sample-reference",
        help="Pre-sample reference completions with their log-probs (rehearsal set for divergence training).",
        description=__doc__,
    )
    parser.add_argument("--model", required=True, help="hub id, local checkpoint or embedded:NAME (the initial policy)")
    parser.add_argument("--prompts", required=True, type=Path, help="JSONL file, one {\"prompt\": ...} per line")
    parser.add_argument("--prompt-column", default="prompt", help="field holding the prompt (default: prompt)")
    parser.add_argument("--out", required=True, type=Path, help="output directory of the rehearsal set")
    parser.add_argument("--num-samples", type=int, default=4, help="completions per prompt (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="completion length cap (default 128)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature; must equal the training temperature (default 1.0)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1.0)")
    parser.add_argument("--top-k", type=int, default=0, help="top-k sampling, 0 = off (default 0)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per generate call (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--quantize", choices=("auto", "4bit", "none"), default="auto",
                        help="load like training does: auto = 4-bit on CUDA, unquantized on CPU")
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from divrl.models import load_model_and_tokenizer
    from divrl.trainers.rehearsal import sample_reference

    prompts = read_prompts(args.prompts, args.prompt_column)
    model, tokenizer = load_model_and_tokenizer(args.model, quantize=args.quantize)
    out = sample_reference(
        model, tokenizer, prompts, args.out, num_samples=args.num_samples, max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, batch_size=args.batch_size, seed=args.seed,
    )
    print(f"wrote {len(prompts) * args.num_samples} reference samples to {out}")
    return 0
