"""`divrl eval molecules`: sample SMILES from a model, score them with the task's objective (divrl's cheap MPO, or a
PMO oracle with `--task-arg objective=NAME`), write metrics.

Writes `DIR/metrics.json` (validity, uniqueness over valid molecules and over all samples, novelty,
IntDiv in the MOSES and TDC conventions, reward distribution, Generative Yield, also within `--budget`
oracle calls, Oracle Burden and PMO's AUC top-10 over `--budget`), `DIR/samples.jsonl` and `DIR/plot.png`. Bad
options fail before the model loads. Heavy imports (RDKit, torch, transformers) live in the handler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from divrl.sampling import add_sampling_arguments
from divrl.task import add_task_arg_option, build_task, merge_task_settings, resolve_prompt_style

BASE_STOP = "\nSMILES:"  # a new few-shot line (base prompts) means the molecule is finished


def register(subparsers: Any) -> None:
    """Add `divrl eval molecules ...`."""
    parser = subparsers.add_parser(
        "molecules",
        help="validity, uniqueness, novelty, diversity, Yield and Oracle Burden of a SMILES generator",
        description="Sample N completions from few-shot SMILES prompts (examples from the SMILES files shipped "
        "with RDKit; or the empty prompt of a chemical LM, --prompt-style clm), score them with the cached objective "
        "(divrl's geometric-mean MPO, or a PMO oracle: --task-arg objective=NAME), and write metrics.json "
        "(including PMO's AUC top-10), samples.jsonl and plot.png.",
    )
    parser.add_argument("--model", required=True, help="hub id, local path, embedded:NAME or LoRA adapter directory")
    parser.add_argument("--samples", type=int, required=True, help="completions to sample in total")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--prompts", type=int, default=16, help="distinct few-shot prompts (default 16)")
    parser.add_argument("--shots", type=int, default=3, help="example molecules per prompt (default 3)")
    parser.add_argument(
        "--prompt-style",
        choices=["auto", "chat", "base", "clm"],
        default="auto",
        help="auto: chat when the tokenizer has a chat template, else few-shot plain text; clm: the empty prompt "
        "(BOS alone) of a chemical LM such as embedded:smiles-clm",
    )
    parser.add_argument(
        "--components",
        nargs="+",
        help="MPO components among validity, qed, sa, hbd (default: the task's, qed sa hbd)",
    )
    parser.add_argument("--hbd-threshold", type=int, help="HBD step: reward 1 if donors <= this (default 3)")
    parser.add_argument(
        "--no-sanity-gate",
        action="store_true",
        help="score every RDKit-valid molecule (default: the chemistry sanity gate scores exotic elements, formal "
        "charges beyond +/-1, dative bonds, radicals and molecules under 9 heavy atoms 0; see metrics "
        "sanity_rejected)",
    )
    add_task_arg_option(parser)  # any MoleculeTask setting; the three options above are its aliases
    parser.add_argument(
        "--tau",
        type=float,
        action="append",
        help="reward threshold(s) in [0, 1) for Yield/Oracle Burden (repeatable; default 0.8 and 0.85)",
    )
    parser.add_argument("--ob-n", type=int, default=100, help="N of the Oracle Burden OB_tau(N) (default 100)")
    parser.add_argument(
        "--budget", type=int, help="also report Generative Yield within the first N oracle calls (yield_N_calls)"
    )
    parser.add_argument("--seed", type=int, default=0)
    add_sampling_arguments(parser, max_new_tokens=64)
    parser.set_defaults(func=_run)


def _output_dir(path: str) -> Path:
    """`path` as a writable directory, created when missing; a ValueError naming --out when that is impossible."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {path} is an existing file, not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # e.g. a path under a file, or no permission
        raise ValueError(f"--out {path}: cannot create the directory ({error.strerror or error})") from error
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path}: the directory is not writable")
    return out


def task_from_args(args: argparse.Namespace) -> Any:
    """The molecule task of `--task-arg KEY=VALUE` and its aliases --components, --hbd-threshold, --no-sanity-gate."""
    aliases = {"components": args.components, "hbd_threshold": args.hbd_threshold,
               "sanity": False if args.no_sanity_gate else None}
    return build_task("molecules", **merge_task_settings(aliases, args.task_arg))


def _run(args: argparse.Namespace) -> int:
    from divrl import sampling, served
    from divrl.cli import require_at_least
    from divrl.tasks.molecules.evaluate import evaluate_molecules, prompt_rows
    from divrl.tasks.molecules.metrics import check_budget, check_taus

    # Everything that user input can break is checked before the (slow) model load.
    require_at_least(args, samples=1, prompts=1, shots=0, ob_n=1)
    taus = tuple(args.tau) if args.tau else (0.8, 0.85)
    check_taus(taus)
    check_budget(args.budget)
    task = task_from_args(args)
    config = sampling.sampling_config_from_args(args, stop=(BASE_STOP,))
    out = _output_dir(args.out)
    # The style only formats the drawn examples, so "auto" is checked with base prompts.
    checked_style = "base" if args.prompt_style == "auto" else args.prompt_style
    prompt_rows(args.samples, style=checked_style, prompts=args.prompts, shots=args.shots, seed=args.seed)
    sampler = served.sampler_from_args(args.model, config, args)
    style = resolve_prompt_style(args.prompt_style, sampler.has_chat_template)
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
        budget=args.budget,
        out_dir=out,
        metadata={"model": args.model, "sampling": {"backend": args.backend, **sampling_config}},
    )
    summary_keys = ["validity", "sanity_rejected", "uniqueness", "sample_uniqueness", "novelty", "intdiv_moses",
                    "intdiv_tdc", "isim_tanimoto", "circles", "yield", "auc_top10"]
    if args.budget is not None:
        summary_keys.append(f"yield_{args.budget}_calls")
    print(json.dumps({k: metrics[k] for k in summary_keys}))
    print(f"wrote metrics.json, samples.jsonl and plot.png to {out}")
    return 0
