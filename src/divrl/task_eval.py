"""`divrl eval task`: any task's held-out prompts, N samples each, scored by the task's own reward functions.

For tasks without a dedicated evaluator (Countdown, your own data, your own task file): validity is the share of
samples the first reward function scores above 0, and, when the task has an `outcome_key`, distinct correct answers
is the number of distinct outcomes among those samples per prompt (how many different right answers the model
finds), with its share of the samples (the rest are repeats). Written to OUT/task_eval.json and printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from divrl.sampling import add_sampling_arguments
from divrl.task import add_task_arg_option, build_task, completion_text, has_hook, parse_task_args, resolve_prompt_style


def evaluate_task(task: Any, dataset: Any, sampler: Any, samples: int) -> dict[str, Any]:
    """Sample `samples` completions per row of `dataset`, score them and summarise per prompt and overall."""
    import numpy as np

    prompts = list(dataset["prompt"])
    completions = sampler(prompts, samples)
    columns = {name: list(dataset[name]) for name in dataset.column_names if name != "prompt"}
    reward = task.reward_funcs()[0]
    rows = []
    for index, (prompt, outputs) in enumerate(zip(prompts, completions, strict=True)):
        row_columns = {name: values[index] for name, values in columns.items()}
        scores = reward(prompts=[prompt] * samples, completions=outputs,
                        **{name: [value] * samples for name, value in row_columns.items()})
        scores = [0.0 if s is None else float(s) for s in scores]
        correct = [o for o, s in zip(outputs, scores, strict=True) if s > 0]
        keys = ({task.outcome_key(o, **row_columns) for o in correct} - {None}
                if has_hook(task, "outcome_key") else None)
        rows.append({"validity": float(np.mean([s > 0 for s in scores])), "mean_reward": float(np.mean(scores)),
                     "distinct_correct": None if keys is None else len(keys),
                     "completions": [completion_text(o) for o in outputs]})
    distinct = [r["distinct_correct"] for r in rows if r["distinct_correct"] is not None]
    return {"prompts": len(rows), "samples": samples,
            "validity": float(np.mean([r["validity"] for r in rows])),
            "mean_reward": float(np.mean([r["mean_reward"] for r in rows])),
            "distinct_correct_per_prompt": float(np.mean(distinct)) if distinct else None,
            "solved_prompts": float(np.mean([r["validity"] > 0 for r in rows])), "per_prompt": rows}


def _run(args: argparse.Namespace) -> int:
    from divrl import sampling, served
    from divrl.cli import output_directory, require_at_least

    require_at_least(args, samples=1)
    task = build_task(args.task, **parse_task_args(args.task_arg))
    out = output_directory(args.out)
    config = sampling.sampling_config_from_args(args, stop=tuple(getattr(task, "stop_strings", ())))
    sampler = served.sampler_from_args(args.model, config, args)
    style = resolve_prompt_style(args.prompt_style, sampler.has_chat_template)
    dataset = task.train_dataset(split=args.split, style=style, seed=args.seed, limit=args.limit,
                                 n_exemplars=args.n_exemplars)
    print(f"{args.model}: {len(dataset)} {args.split} prompts x {args.samples} samples ({style} prompts)",
          file=sys.stderr)
    result = {"task": args.task, "model": args.model, "split": args.split, "prompt_style": style,
              "sampling": {k: v for k, v in vars(config).items() if k != "progress"},
              **evaluate_task(task, dataset, sampler, args.samples)}
    (out / "task_eval.json").write_text(json.dumps(result, indent=1) + "\n")
    distinct = result["distinct_correct_per_prompt"]
    print(f"validity {result['validity']:.3f}  solved prompts {result['solved_prompts']:.3f}  mean reward "
          f"{result['mean_reward']:.3f}" + (f"  distinct correct answers per prompt {distinct:.2f}"
                                              if distinct is not None else ""))
    print(f"wrote {out / 'task_eval.json'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `divrl eval task`."""
    parser = subparsers.add_parser(
        "task", help="validity and distinct correct answers of a model on any task's held-out prompts",
        description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="registered name, package.module:Factory or file.py:Factory")
    add_task_arg_option(parser)
    parser.add_argument("--model", required=True, help="hub id, local path, embedded:NAME or LoRA adapter directory")
    parser.add_argument("--split", default="test", help="the task's split (default test)")
    parser.add_argument("--seed", type=int, default=0, help="split and sampling seed")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    parser.add_argument("--samples", type=int, default=8, help="completions per prompt (default 8)")
    parser.add_argument("--prompt-style", choices=["auto", "chat", "base"], default="auto")
    parser.add_argument("--n-exemplars", type=int, default=0, help="worked examples in base prompts, if the task has")
    add_sampling_arguments(parser, max_new_tokens=64)
    parser.add_argument("--out", required=True, help="output directory")
    parser.set_defaults(func=_run)
