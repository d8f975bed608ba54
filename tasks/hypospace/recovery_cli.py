"""`divrl eval recovery`: recovery-rate curves of one or more models (or checkpoints) on a HypoSpace split.

Writes `DIR/recovery.json` (per-instance curves, validity, uniqueness, macro-averages with 95% bootstrap
intervals) and `DIR/recovery.png` (one curve per model / checkpoint). Heavy imports live in the handler.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from divrl.sampling import add_sampling_arguments
from divrl.tasks.hypospace.cli import add_task_arguments, output_directory, split_from_args, task_from_args

TASK_NAMES = ("hypospace-causal", "hypospace-voxel", "hypospace-boolean")


def register(subparsers: Any) -> None:
    """Add `divrl eval recovery ...`."""
    parser = subparsers.add_parser(
        "recovery",
        help="recovery-rate curves RR(n) of models on a HypoSpace split",
        description="Sample N answers per instance (parallel, or sequential listing earlier proposals), and "
        "report RR(n), validity and uniqueness with 95% bootstrap intervals. A directory holding TRL "
        "checkpoint-* folders is expanded into one curve per checkpoint.",
    )
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="hub id, local path, embedded:NAME, "
        "LoRA adapter directory, or a run directory with checkpoint-*; repeat for several",
    )
    parser.add_argument("--task", required=True, choices=TASK_NAMES)
    add_task_arguments(parser)
    parser.add_argument("--split", choices=["train", "test", "all"], default="test")
    parser.add_argument("--samples", type=int, default=16, help="samples N per instance (default 16)")
    parser.add_argument("--protocol", choices=["parallel", "sequential"], default="parallel")
    parser.add_argument(
        "--prompt-style",
        choices=["auto", "chat", "base"],
        default="auto",
        help="auto: chat when the tokenizer has a chat template, else few-shot plain text",
    )
    parser.add_argument("--n-exemplars", type=int, default=3, help="worked examples in base prompts (default 3)")
    add_sampling_arguments(parser, max_new_tokens=128)
    parser.add_argument("--instances-per-call", type=int, default=8, help="instances sampled together")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument("--save-completions", action="store_true", help="keep raw completions in the JSON")
    parser.add_argument("--out", required=True, help="output directory")
    parser.set_defaults(func=_run)


def _checkpoint_step(path: Path) -> int:
    match = re.search(r"(\d+)$", path.name)
    return int(match.group(1)) if match else -1


def expand_models(models: list[str]) -> list[tuple[str, str]]:
    """(label, model) pairs; a directory that is not itself a model but holds checkpoint-* gives one each."""
    expanded = []
    for model in models:
        path = Path(model).expanduser()
        is_model = (path / "config.json").is_file() or (path / "adapter_config.json").is_file()
        checkpoints = sorted(path.glob("checkpoint-*"), key=_checkpoint_step) if path.is_dir() else []
        if not is_model and checkpoints:
            expanded += [(f"{path.name}/{c.name}", str(c)) for c in checkpoints if c.is_dir()]
        else:
            expanded.append((model, model))
    return expanded


def _check_model_exists(model: str) -> None:
    from divrl.models import resolve_model_name

    if not (Path(model).expanduser() / "adapter_config.json").is_file():
        resolve_model_name(model)


def _run(args: argparse.Namespace) -> int:
    import gc

    from divrl import sampling
    from divrl.cli import require_at_least
    from divrl.tasks.hypospace.common import END_MARKER
    from divrl.tasks.hypospace.recovery import evaluate_recovery, plot_recovery

    require_at_least(args, samples=1, n_exemplars=0, instances_per_call=1, bootstrap=1)
    task = task_from_args(args.task, args)
    instances = split_from_args(task, args)
    out = output_directory(args.out)
    models = expand_models(args.model)
    for _, model in models:
        _check_model_exists(model)
    config = sampling.sampling_config_from_args(args, stop=(f"\n{END_MARKER}",), progress=False)
    results = []
    for label, model in models:
        sampler = sampling.make_sampler(model, config, backend=args.backend, quantize=args.quantize, dtype=args.dtype)
        style = args.prompt_style
        if style == "auto":
            style = "chat" if sampler.has_chat_template else "base"
        build = task.prompts_for(style, args.seed, args.test_fraction, args.limit, args.n_exemplars)
        print(
            f"{label}: {len(instances)} instances x {args.samples} samples ({args.protocol}, {style} prompts)",
            file=sys.stderr,
        )
        result = evaluate_recovery(
            task,
            instances,
            sampler,
            args.samples,
            args.protocol,
            build,
            args.instances_per_call,
            args.bootstrap,
            args.seed,
            args.save_completions,
            progress=not args.no_progress,
        )
        results.append({"label": label, "model": model, "prompt_style": style, **result})
        del sampler
        gc.collect()
    report = {
        "task": task.name,
        "params": task.params,
        "split": args.split,
        "seed": args.seed,
        "test_fraction": args.test_fraction,
        "limit": args.limit,
        "samples": args.samples,
        "protocol": args.protocol,
        "sampling": {"backend": args.backend, **{k: v for k, v in vars(config).items() if k != "progress"}},
        "models": results,
    }
    (out / "recovery.json").write_text(json.dumps(report, indent=1) + "\n")
    title = f"{task.name} {task.params}: {args.split} split, {len(instances)} instances, {args.protocol}"
    plot_recovery(results, out / "recovery.png", title)
    print(f"{'model':40s} {'validity':>9s} {'uniqueness':>10s} {'RR@' + str(args.samples):>8s}  95% CI")
    for r in results:
        rr = r["recovery"]
        print(
            f"{r['label'][-40:]:40s} {r['validity']['mean']:9.3f} {r['uniqueness']['mean']:10.3f} "
            f"{rr['mean']:8.3f}  [{rr['ci_low']:.3f}, {rr['ci_high']:.3f}]"
        )
    print(f"wrote {out / 'recovery.json'} and {out / 'recovery.png'}")
    return 0
