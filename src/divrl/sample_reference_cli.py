"""`divrl sample-reference`: pre-sample a rehearsal set from the reference (initial) policy (the DPH-RL paper).

The set feeds `DivRLConfig(divergence=..., divergence_estimator="rehearsal", divergence_rehearsal_path=DIR)`.
With `--recipe` the prompts, stop strings and correctness come from the recipe's task, so the set can be
built as DPH-RL publishes it: `--split` keeps the correct samples of the prompts the initial policy solves in
every sample (rehearsal) and writes the others to DIR/exploration.jsonl, the prompts RL then trains on
(`divrl train RECIPE --train_prompts DIR/exploration.jsonl --divergence_rehearsal_path DIR`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from divrl.task import read_prompts, resolve_prompt_style


def register(subparsers: Any) -> None:
    """Add `divrl sample-reference --model M --prompts FILE --out DIR [...]`."""
    parser = subparsers.add_parser(
        "sample-reference",
        help="Pre-sample reference completions with their log-probs (rehearsal set for divergence training).",
        description=__doc__,
    )
    parser.add_argument("--model", help="hub id, local checkpoint or embedded:NAME (the initial policy; default: the "
                        "recipe's model_name_or_path)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompts", type=Path, help="JSONL file, one {\"prompt\": ...} per line")
    source.add_argument("--recipe", help="a `divrl train` recipe: prompts of its task's training split, its stop "
                        "strings, and its task's first reward function as correctness (> 0)")
    parser.add_argument("--correct-only", action="store_true",
                        help="keep only correct samples (needs --recipe)")
    parser.add_argument("--split", action="store_true",
                        help="DPH-RL: keep the correct samples of prompts solved in every sample, write the other "
                        "prompts to OUT/exploration.jsonl (needs --recipe)")
    parser.add_argument("--prompt-column", default="prompt", help="field holding the prompt (default: prompt)")
    parser.add_argument("--out", required=True, type=Path, help="output directory of the rehearsal set")
    parser.add_argument("--num-samples", type=int, default=4, help="completions per prompt (default 4)")
    parser.add_argument("--max-new-tokens", type=int, help="completion length cap (default: the recipe's "
                        "max_completion_length, else 128)")
    parser.add_argument("--temperature", type=float, help="sampling temperature; must equal the training "
                        "temperature (default: the recipe's, else 1.0)")
    parser.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1.0)")
    parser.add_argument("--top-k", type=int, default=0, help="top-k sampling, 0 = off (default 0)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per generate call (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--quantize", choices=("auto", "4bit", "none"), default="auto",
                        help="load like training does: auto = bf16 on CUDA where it fits, else 4-bit NF4; "
                        "unquantized on CPU")
    parser.set_defaults(func=_handle)


def _handle(args: argparse.Namespace) -> int:
    from divrl.models import load_model_and_tokenizer
    from divrl.trainers.rehearsal import sample_reference

    if (args.correct_only or args.split) and args.recipe is None:
        raise ValueError("--correct-only and --split judge correctness with a task's reward: give --recipe")
    settings: dict[str, Any] = {"max_new_tokens": 128, "temperature": 1.0}
    recipe = _RecipeTask(args.recipe) if args.recipe else None
    if recipe is not None:
        settings.update(max_new_tokens=recipe.training.max_completion_length, temperature=recipe.training.temperature)
    settings.update({k: v for k in settings if (v := getattr(args, k)) is not None})
    model_name = args.model or (recipe.model_name if recipe else None)
    if not model_name:
        raise ValueError("--model is required without a recipe naming model_name_or_path")
    model, tokenizer = load_model_and_tokenizer(model_name, quantize=args.quantize)
    if recipe is not None:
        recipe.load_prompts(tokenizer)
    prompts = recipe.prompts if recipe is not None else read_prompts(args.prompts, args.prompt_column)
    out = sample_reference(
        model, tokenizer, prompts, args.out, num_samples=args.num_samples, top_p=args.top_p, top_k=args.top_k,
        batch_size=args.batch_size, seed=args.seed, stop_strings=recipe.stop_strings if recipe else (),
        score=recipe.score if recipe else None, correct_only=args.correct_only, split=args.split, **settings,
    )
    meta = json.loads((out / "divrl_rehearsal.json").read_text())
    kept = f"{meta['rows']} of {len(prompts) * args.num_samples}"
    split = f"; {meta['rehearsal_prompts']} rehearsal prompts, the rest in {out / 'exploration.jsonl'}" \
        if args.split else ""
    print(f"wrote {kept} reference samples to {out}{split}")
    return 0


class _RecipeTask:
    """The task of a `divrl train` recipe: its training prompts, stop strings and a correctness score."""

    def __init__(self, path: str) -> None:
        from divrl.backends.stop_strings import resolve_stop_strings
        from divrl.task import build_task
        from divrl.train import parse_recipe, task_args_with_overrides

        self.script, self.training, model_args = parse_recipe(["--config", path])
        self.model_name = model_args.model_name_or_path
        self.task = build_task(self.script.task, **task_args_with_overrides(self.script))
        self.stop_strings = resolve_stop_strings(self.training, self.task)
        self.reward = self.task.reward_funcs()[0]
        self.rows: list[dict[str, Any]] = []
        self.prompts: list[Any] = []

    def load_prompts(self, tokenizer: Any) -> None:
        """The training split's rows, with prompts in the style training would use for this tokenizer."""
        style = resolve_prompt_style(self.script.prompt_style, bool(getattr(tokenizer, "chat_template", None)))
        dataset = self.task.train_dataset(split=self.script.split, style=style, seed=self.script.split_seed,
                                          limit=self.script.instance_limit, n_exemplars=self.script.n_exemplars)
        self.rows = [dict(row) for row in dataset]
        self.prompts = [row["prompt"] for row in self.rows]

    def score(self, index: int, completion: str) -> float:
        """The task's first reward of `completion` for training row `index` (None, unscorable: 0)."""
        row = self.rows[index]
        columns = {k: [v] for k, v in row.items() if k not in ("prompt", "completion")}
        value = self.reward(prompts=[row["prompt"]], completions=[completion], **columns)[0]
        return 0.0 if value is None else float(value)
