"""`divrl eval molecules`: sample SMILES from a model, score them with the cheap MPO, write metrics.

Writes `DIR/metrics.json` (validity, uniqueness, novelty, IntDiv in the MOSES and TDC conventions,
reward distribution, Generative Yield and Oracle Burden), `DIR/samples.jsonl` and `DIR/plot.png`.
Heavy imports (RDKit, torch, transformers) live in the handler.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from divrl.sampling import add_sampling_arguments

BASE_STOP = "\nSMILES:"  # a new few-shot line (base prompts) means the molecule is finished


def register(subparsers: Any) -> None:
    """Add `divrl eval molecules ...`."""
    parser = subparsers.add_parser(
        "molecules",
        help="validity, uniqueness, novelty, diversity, Yield and Oracle Burden of a SMILES generator",
        description="Sample N completions from few-shot SMILES prompts (examples from the SMILES files shipped "
        "with RDKit), score them with the cached geometric-mean MPO, and write metrics.json, samples.jsonl "
        "and plot.png.",
    )
    parser.add_argument("--model", required=True, help="hub id, local path, embedded:NAME or LoRA adapter directory")
    parser.add_argument("--samples", type=int, required=True, help="completions to sample in total")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--prompts", type=int, default=16, help="distinct few-shot prompts (default 16)")
    parser.add_argument("--shots", type=int, default=3, help="example molecules per prompt (default 3)")
    parser.add_argument(
        "--prompt-style",
        choices=["auto", "chat", "base"],
        default="auto",
        help="auto: chat when the tokenizer has a chat template, else few-shot plain text",
    )
    parser.add_argument(
        "--components",
        nargs="+",
        help="MPO components among validity, qed, sa, hbd (default: the task's, qed sa hbd)",
    )
    parser.add_argument("--hbd-threshold", type=int, default=3, help="HBD step: reward 1 if donors <= this")
    parser.add_argument(
        "--tau",
        type=float,
        action="append",
        help="reward threshold(s) for Yield/Oracle Burden (repeatable; default 0.8 and 0.85)",
    )
    parser.add_argument("--ob-n", type=int, default=100, help="N of the Oracle Burden OB_tau(N) (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    add_sampling_arguments(parser, max_new_tokens=64)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from divrl import sampling
    from divrl.cli import require_at_least
    from divrl.tasks.molecules.evaluate import evaluate_molecules
    from divrl.tasks.molecules.task import MoleculeTask

    require_at_least(args, samples=1, prompts=1, shots=0, ob_n=1)
    components = {"components": args.components} if args.components else {}
    task = MoleculeTask(**components, hbd_threshold=args.hbd_threshold)  # validates before loading the model
    taus = tuple(args.tau) if args.tau else (0.8, 0.85)
    config = sampling.sampling_config_from_args(args, stop=(BASE_STOP,))
    sampler = sampling.make_sampler(args.model, config, backend=args.backend, quantize=args.quantize, dtype=args.dtype)
    style = args.prompt_style
    if style == "auto":
        style = "chat" if sampler.has_chat_template else "base"
    print(f"{args.model}: {args.samples} samples over {args.prompts} {style} prompts", file=sys.stderr)
    sampling_config = {k: v for k, v in vars(config).items() if k != "progress"}
    metrics = evaluate_molecules(
        sampler,
        args.samples,
        style=style,
        prompts=args.prompts,
        shots=args.shots,
        seed=args.seed,
        task=task,
        taus=taus,
        ob_n=args.ob_n,
        out_dir=args.out,
        metadata={"model": args.model, "sampling": {"backend": args.backend, **sampling_config}},
    )
    summary = {k: metrics[k] for k in ("validity", "uniqueness", "novelty", "intdiv_moses", "intdiv_tdc", "yield")}
    print(json.dumps(summary))
    print(f"wrote metrics.json, samples.jsonl and plot.png to {args.out}")
    return 0
