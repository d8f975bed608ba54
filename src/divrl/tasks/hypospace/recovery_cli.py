"""`divrl eval recovery`: recovery-rate curves of one or more models (or checkpoints) on a HypoSpace split.

Writes `DIR/recovery.json` (per-instance prefix and order-free curves, RR@|H_O|, RR@N, validity, uniqueness,
Vendi score of the valid proposals, pass@k of validity, macro-averages with 95% bootstrap intervals) and
`DIR/recovery.png` (one colour per model / checkpoint). Each model's finished instances are kept in `DIR/partial/`
until the end, so rerunning an interrupted command resumes it. Heavy imports live in the handler.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from divrl.cli import output_directory
from divrl.sampling import add_sampling_arguments
from divrl.task import resolve_prompt_style
from divrl.tasks.hypospace.cli import add_task_arguments, split_from_args, task_from_args
from divrl.tasks.hypospace.common import SPLITS, Instance

TASK_NAMES = ("hypospace-causal", "hypospace-voxel", "hypospace-boolean")


def recipe_eval_flags(recipe: dict[str, Any], zero_shot: bool = False) -> list[str]:
    """`divrl eval recovery` flags for the split seed, prompts and temperature a training recipe uses, so a model is
    evaluated on the prompts it trained on (`zero_shot`: no worked examples, as after `divrl sft`). Missing keys take
    `divrl train`'s defaults (TrainScriptArguments, GRPOConfig's temperature 1.0)."""
    return ["--seed", str(recipe.get("split_seed", 0)), "--prompt-style", recipe.get("prompt_style", "auto"),
            "--n-exemplars", str(0 if zero_shot else recipe.get("n_exemplars", 3)),
            "--temperature", str(recipe.get("temperature", 1.0))]


def register(subparsers: Any) -> None:
    """Add `divrl eval recovery ...`."""
    parser = subparsers.add_parser(
        "recovery",
        help="recovery-rate curves RR(n) of models on a HypoSpace split",
        description="Sample N answers per instance (parallel, or sequential listing earlier proposals), and "
        "report RR(n), validity, uniqueness and pass@k of validity with 95% bootstrap intervals. A directory "
        "holding TRL checkpoint-* folders is expanded into one curve per checkpoint. An interrupted evaluation "
        "resumes when the same command runs again: finished instances wait in OUT/partial until the end.",
        epilog="Two recovery curves are reported. The prefix curve RR(n) counts the distinct admissible hypotheses "
        "among the first n samples as drawn (HypoSpace's protocol; JSON 'curve', dotted in the plot). The "
        "order-free curve averages it over every ordering of the N samples: per admissible h with c_h of N "
        "samples equal to h, P(h found within n) = 1 - C(N - c_h, n) / C(N, n), averaged over h (JSON "
        "'curve_unbiased', solid in the plot). The printed table uses the order-free estimate for RR@|H_O| "
        "(HypoSpace's headline budget; only instances with N >= |H_O| count), the ceiling its validity allows "
        "(the same validity spread evenly over H_O; no model with that validity expects more) and RR@N = recovery "
        "after all N "
        "samples, where both curves agree; pass@N is pass@k of validity at k = N (same estimator, c = valid "
        "samples) and validity = pass@1.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        help="hub id, local path, embedded:NAME, "
        "LoRA adapter directory, or a run directory with checkpoint-*; repeat for several",
    )
    parser.add_argument(
        "--label",
        action="append",
        default=None,
        help="name shown for the --model at the same position in the table, plot and JSON (default: the model as "
        "given; a run directory's checkpoints become LABEL/checkpoint-N); give one per --model or none",
    )
    parser.add_argument("--task", required=True, choices=TASK_NAMES)
    add_task_arguments(parser)
    parser.add_argument("--split", choices=SPLITS, default="test",
                        help="test (default), train, all, or dev / fit: the train split's held-out fifth and the rest")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--samples", type=int, default=None, help="samples N per instance (default 16)")
    budget.add_argument(
        "--samples-per-hypothesis",
        type=float,
        default=None,
        metavar="M",
        help="HypoSpace's budget instead of --samples: N = ceil(M * |H_O|) samples per instance (its reference "
        "uses M = 2); curves are then averaged up to the smallest N",
    )
    parser.add_argument("--sample-seed", type=int, default=None,
                        help="seed of the sampling stream (default: --seed, which also fixes the split); give each "
                             "training seed's model its own stream with the same split")
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


def expand_models(models: list[str], labels: list[str] | None = None) -> list[tuple[str, str]]:
    """(label, model) pairs, labelled by `labels` (one per model) or by the models as given; a directory that is
    not itself a model but holds checkpoint-* gives one pair each, `<label or directory name>/checkpoint-N`."""
    if labels is not None and len(labels) != len(models):
        raise ValueError(f"--label was given {len(labels)} time(s) for {len(models)} --model(s): give one label per "
                         "model, in the same order, or none")
    expanded = []
    for model, label in zip(models, labels or [None] * len(models), strict=True):
        path = Path(model).expanduser()
        is_model = (path / "config.json").is_file() or (path / "adapter_config.json").is_file()
        checkpoints = sorted(path.glob("checkpoint-*"), key=_checkpoint_step) if path.is_dir() else []
        if not is_model and checkpoints:
            expanded += [(f"{label or path.name}/{c.name}", str(c)) for c in checkpoints if c.is_dir()]
        else:
            expanded.append((label or model, model))
    return expanded


def _check_model_exists(model: str) -> None:
    from divrl.models import resolve_model_name

    if not (Path(model).expanduser() / "adapter_config.json").is_file():
        resolve_model_name(model)


class PartialCompletions:
    """The completions of one model's finished instances, appended to a JSONL file after each chunk so that an
    interrupted evaluation resumes where it stopped (`done`). The file is named by a hash of the evaluation's
    settings and starts with them, so other settings never read or overwrite it. Each chunk of instances is sampled
    from its own seed (`sample_instances`), so a resumed evaluation draws for the rest what an uninterrupted one
    would."""

    def __init__(self, directory: Path, settings: dict[str, Any]) -> None:
        self.settings = json.loads(json.dumps(settings, sort_keys=True))  # as read back from the file
        header = json.dumps(self.settings, sort_keys=True)
        self.path = directory / f"{hashlib.sha256(header.encode()).hexdigest()[:16]}.jsonl"
        self.done: dict[str, list[str]] = {}
        lines = self.path.read_text().splitlines() if self.path.is_file() else []
        if lines and _json_or_none(lines[0]) == self.settings:
            for line in lines[1:]:
                row = _json_or_none(line)
                if row is None:  # a line cut short by the interruption: its chunk is sampled again
                    break
                self.done[row["id"]] = row["completions"]
        directory.mkdir(parents=True, exist_ok=True)
        staged = self.path.with_suffix(".tmp")  # rewritten without a cut line, replaced in one step
        staged.write_text("".join([header + "\n", *(json.dumps({"id": i, "completions": c}) + "\n"
                                                    for i, c in self.done.items())]))
        os.replace(staged, self.path)

    def add(self, instances: Sequence[Instance], completions: list[list[str]]) -> None:
        """Record a finished chunk."""
        with self.path.open("a") as file:
            for instance, answers in zip(instances, completions, strict=True):
                file.write(json.dumps({"id": instance.id, "completions": answers}) + "\n")


def _json_or_none(line: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def model_signature(model: str) -> list[Any]:
    """What identifies a model's weights for resuming: the name, plus each weight file's name and sha256 when it
    is a local directory. A retrained adapter at the same path is a different model; the same weights checked out
    on another machine (new file times) are the same one, so an evaluation committed mid-way resumes there."""
    path = Path(model).expanduser()
    files = sorted(f for pattern in ("*.safetensors", "*.bin") for f in path.glob(pattern)) if path.is_dir() else []
    return [model, *([f.name, _sha256(f)] for f in files)]


def _sha256(path: Path) -> str:
    """Hex sha256 of a file, read in 16 MiB blocks (about a second per GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def _run(args: argparse.Namespace) -> int:
    import gc

    from divrl import sampling, served
    from divrl.cli import require_at_least
    from divrl.tasks.hypospace.common import END_MARKER
    from divrl.tasks.hypospace.recovery import evaluate_recovery, plot_recovery, samples_per_instance

    if args.samples is None and args.samples_per_hypothesis is None:
        args.samples = 16
    if args.samples is not None:
        require_at_least(args, samples=1)
    elif not args.samples_per_hypothesis > 0:
        raise ValueError(f"--samples-per-hypothesis must be > 0, got {args.samples_per_hypothesis}")
    require_at_least(args, n_exemplars=0, instances_per_call=1, bootstrap=1)
    task = task_from_args(args.task, args)
    instances = split_from_args(task, args)
    if args.samples is not None:
        samples: int | list[int] = args.samples
        budget = f"{args.samples} samples"
    else:
        samples = samples_per_instance(instances, args.samples_per_hypothesis)
        budget = f"ceil({args.samples_per_hypothesis:g} x |H_O|) = {min(samples)}..{max(samples)} samples"
    models = expand_models(args.model, args.label)
    out = output_directory(args.out)
    for _, model in models:
        if not args.base_url:  # a served model's name is the server's to resolve
            _check_model_exists(model)
    config = sampling.sampling_config_from_args(args, stop=(f"\n{END_MARKER}",), progress=False)
    if args.sample_seed is not None:
        config = dataclasses.replace(config, seed=args.sample_seed)
    sampling_settings = {"backend": "served" if args.base_url else args.backend,
                         **{k: v for k, v in vars(config).items() if k != "progress"}}
    results, partials = [], []
    for label, model in models:
        sampler = served.sampler_from_args(model, config, args)
        style = resolve_prompt_style(args.prompt_style, sampler.has_chat_template)
        build = task.prompts_for(style, args.seed, args.test_fraction, args.limit, args.n_exemplars)
        partial = PartialCompletions(out / "partial", {
            "model": [args.base_url, model] if args.base_url else model_signature(model),
            "task": task.name, "params": task.params, "split": args.split,
            "seed": args.seed, "test_fraction": args.test_fraction, "limit": args.limit,
            "instances": [i.id for i in instances], "samples": samples, "protocol": args.protocol,
            "prompt_style": style, "n_exemplars": args.n_exemplars, "quantize": args.quantize, "dtype": args.dtype,
            "sampling": sampling_settings})
        partials.append(partial)
        resumed = f", {len(partial.done)} resumed from {partial.path}" if partial.done else ""
        print(
            f"{label}: {len(instances)} instances x {budget} ({args.protocol}, {style} prompts{resumed})",
            file=sys.stderr,
        )
        result = evaluate_recovery(
            task,
            instances,
            sampler,
            samples,
            args.protocol,
            build,
            args.instances_per_call,
            args.bootstrap,
            args.seed,
            args.save_completions,
            progress=not args.no_progress,
            done=partial.done,
            on_chunk=partial.add,
            sample_seed=config.seed,
        )
        results.append({"label": label, "model": model, "prompt_style": style, **result,
                        "resumed_instances": len(partial.done)})
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
        "samples_per_hypothesis": args.samples_per_hypothesis,
        "protocol": args.protocol,
        "estimators": {
            "curve": "prefix RR(n): distinct admissible hypotheses among the first n samples as drawn, over |H_O|",
            "curve_unbiased": "order-free RR(n): mean over admissible h of 1 - C(N - c_h, n) / C(N, n)",
            "recovery": "RR@N: recovery after all N samples (both curves agree there)",
            "pass_at_n": "pass@N of validity: at least one valid sample among the instance's N",
            "recovery_at_n_admissible": "order-free RR at n = |H_O|, over the instances with N >= |H_O|",
            "uniform_ceiling_at_n_admissible": "the RR at n = |H_O| the validity allows (valid samples spread evenly "
                                               "over H_O: 1 - E[(1 - 1/|H_O|)^m], m valid among |H_O| drawn)",
            "pass_at_k": "pass@k of validity: 1 - C(N - c, k) / C(N, k), c = valid samples",
            "curve_n": "summary curves cover n = 1..curve_n, the smallest N among the instances",
        },
        "sampling": sampling_settings,
        "models": results,
    }
    (out / "recovery.json").write_text(json.dumps(report, indent=1) + "\n")
    for partial in partials:  # every model finished: nothing left to resume
        partial.path.unlink()
    if (out / "partial").is_dir() and not any((out / "partial").iterdir()):
        (out / "partial").rmdir()
    title = f"{task.name} {task.params}: {args.split} split, {len(instances)} instances, {args.protocol}"
    plot_recovery(results, out / "recovery.png", title)
    print_table(results)
    print(f"wrote {out / 'recovery.json'} and {out / 'recovery.png'}")
    return 0


def _cell(stats: dict[str, Any] | None, width: int) -> str:
    return f"{stats['mean']:{width}.3f}" if stats else f"{'-':>{width}s}"


def print_table(results: list[dict[str, Any]]) -> None:
    """One row per model: validity, uniqueness, Vendi score of the valid proposals, pass@N of validity, order-free
    RR@|H_O| and the ceiling its validity allows, RR@N and its 95% CI."""
    print(f"{'model':40s} {'validity':>9s} {'uniqueness':>10s} {'vendi':>6s} {'pass@N':>7s} {'RR@|H_O|':>9s} "
          f"{'ceiling':>8s} {'RR@N':>7s}  95% CI")
    for r in results:
        rr = r["recovery"]
        print(
            f"{r['label'][-40:]:40s} {r['validity']['mean']:9.3f} {r['uniqueness']['mean']:10.3f} "
            f"{r['vendi_valid']['mean']:6.2f} {_cell(r['pass_at_n'], 7)} {_cell(r['recovery_at_n_admissible'], 9)} "
            f"{_cell(r['uniform_ceiling_at_n_admissible'], 8)} {rr['mean']:7.3f}  "
            f"[{rr['ci_low']:.3f}, {rr['ci_high']:.3f}]"
        )
    print("RR@|H_O|: order-free estimate after |H_O| samples; ceiling: the RR@|H_O| the validity would give with the "
          "valid samples spread evenly over H_O (RR@|H_O| far below it: samples piled on few answers); RR@N: after all "
          "N samples; pass@N: at least one valid among the N samples (N per instance); vendi: effective number of "
          "distinct valid hypotheses per instance (Vendi score). See --help.")
