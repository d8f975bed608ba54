"""What a divrl run's model card and model tags say: the methods that ran and the papers they come from.

TRL builds the card from three trainer attributes (`_name`, `_paper`, `_tag_names`); GRPOTrainer's class values
name GRPO and cite DeepSeekMath. `DivRLTrainer` sets them per instance from its config with `model_card_identity`,
which reads each enabled method's `Card` from the registry (`divrl.methods`).
Without any method the run IS GRPO and keeps GRPOTrainer's values (plus the `divrl` tag).

TRL writes its card into output_dir only, and PEFT's `save_pretrained` writes its blank template ("Model Card for
Model ID") into every adapter folder. `write_model_card` replaces that, after every save (the final model, each
checkpoint, the demo's adapters, `divrl sft`'s warm starts), with divrl's card: methods, each paper's citation
(authors, year, title, arXiv id), task, base model, the command as typed (paths under the working folder or home
written relative to it, so no machine's absolute paths), the held-out evaluation where the run has one (its recovery
evaluation; the demo adds its own after training, `add_held_out`), and the last training step's metrics, marked as
one batch's. It also records the base model in adapter_config.json by its portable name
(`embedded:gemma-3-270m`, a hub id), which divrl's loaders resolve on any machine, instead of the absolute path it
was loaded from.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from divrl.methods import Card, Stage, active

CARD_FILE = "README.md"
ADAPTER_CONFIG = "adapter_config.json"
GRPO_TRAINER = "divrl's `DivRLTrainer` (TRL's `GRPOTrainer` with diversity-preserving methods)"


def method_cards(args: Any) -> tuple[dict[str, Card], bool]:
    """The enabled methods' cards by name (one per card: MaxEnt-GRPO's three parts are one method), and whether
    every method that has one replaces GRPO's objective (FlowRL)."""
    cards, replaces_grpo = {}, True
    for method in active(args):
        card = method.card_for(args)
        if card is not None:
            cards.setdefault(card.name, card)
            replaces_grpo = replaces_grpo and method.stage is Stage.OBJECTIVE
    return cards, replaces_grpo


def distinct_papers(cards: dict[str, Card]) -> list[dict[str, Any]]:
    """The papers of `cards`, each once, in order."""
    return list({id(card.paper): card.paper for card in cards.values()}.values())


def model_card_identity(args: Any, grpo_tags: list[str], grpo_name: str, grpo_paper: dict[str, Any]
                        ) -> tuple[list[str], str, dict[str, Any]]:
    """(`_tag_names`, `_name`, `_paper`) for a run with config `args`: the enabled methods joined with " + ", the
    paper they come from (its title and arXiv id only when exactly one paper is involved, else none, so the card
    never credits one paper with a combination) and every distinct citation; GRPOTrainer's own values when no
    method is on. A run whose methods all replace GRPO's objective (FlowRL) is not tagged `grpo`."""
    cards, replaces_grpo = method_cards(args)
    if not cards:
        return [*grpo_tags, "divrl"], grpo_name, grpo_paper
    tags = ["trl", "divrl", *(card.tag for card in cards.values())]
    if not replaces_grpo:
        tags.insert(1, "grpo")
    papers = distinct_papers(cards)
    paper = {"citation": "\n\n".join(p["citation"] for p in papers)}
    if len(papers) == 1 and papers[0]["id"] is not None:
        paper.update(title=papers[0]["title"], id=papers[0]["id"])
    return tags, " + ".join(cards), paper


def card_facts(task: str, task_args: dict[str, Any], command: str | None) -> dict[str, Any]:
    """What a recipe run tells its model card beyond the trainer: the task with its settings and the command."""
    return {"task": f"{task} {task_args}" if task_args else task, "command": command}


def portable_args(args: list[str], cwd: Path | None = None, home: Path | None = None) -> list[str]:
    """`args` with each absolute path (alone or as `--flag=PATH`) under `cwd` written relative to it, else under
    `home` as `~/...`: what a card records, the same on any machine (other absolute paths stay as they are)."""
    cwd, home = cwd or Path.cwd(), home or Path.home()

    def portable(value: str) -> str:
        path = Path(value)
        if not path.is_absolute():
            return value
        for root, prefix in ((cwd, ""), (home, "~/")):
            if path.is_relative_to(root):
                relative = str(path.relative_to(root))
                return prefix + relative if relative != "." else prefix.rstrip("/") or "."
        return value

    out = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        out.append(f"{flag}={portable(value)}" if sep and flag.startswith("-") else portable(arg))
    return out


def script_command() -> str:
    """The command line of this process as the user typed it (the program by its name, paths made portable), as a
    card records it when nothing more precise was given."""
    return shlex.join([Path(sys.argv[0]).name, *portable_args(sys.argv[1:])])


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


# What the card says above each kind of logged numbers.
HELD_OUT_NOTE = "Held-out instances, sampled from the model as saved: the numbers to judge it by."
TRAINING_NOTE = ("One training batch's numbers (its rewards, diversity and loss, under the sampling and shaping of "
                 "training): noisy from step to step, and no measure of the model on held-out instances.")


def metrics_at_save(log_history: list[dict[str, Any]]) -> list[tuple[str, dict[str, float]]]:
    """The last evaluation entry (held-out recovery, TRL's eval loop) and the last logged training entry, each as
    (heading, its numbers): what the card shows as the metrics at save, held-out first."""
    found = []
    for heading, is_kind in (("held-out evaluation", lambda key: key.startswith(("eval_", "divrl/eval/"))),
                             ("last logged training step", lambda key: key == "loss")):
        entry = next((e for e in reversed(log_history) if any(map(is_kind, e))), None)
        if entry is not None:
            numbers = {k: float(v) for k, v in entry.items()
                       if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"}
            found.append((f"{heading}, step {entry.get('step', '?')}", numbers))
    return found


def metrics_section(heading: str, numbers: dict[str, float], note: str) -> list[str]:
    """A card section: the heading, what the numbers are, and their table."""
    return [f"## Metrics at save ({heading})", "", note, "", "| metric | value |", "|---|---|",
            *(f"| {key} | {_number(value)} |" for key, value in sorted(numbers.items())), ""]


def add_held_out(folder: Path, heading: str, numbers: dict[str, float], note: str) -> None:
    """Put a held-out evaluation made after training (e.g. the demo's) into `folder`'s card, above the training
    metrics: `## Held-out evaluation (heading)`, `note` saying what was evaluated, and the numbers."""
    path = folder / CARD_FILE
    card = path.read_text()
    section = "\n".join([f"## Held-out evaluation ({heading})", "", note, "", "| metric | value |", "|---|---|",
                         *(f"| {key} | {_number(value)} |" for key, value in numbers.items()), "", ""])
    anchor = next((card.index(mark) for mark in ("## Metrics at save", "## Loading", "## Citations") if mark in card),
                  len(card))
    path.write_text(card[:anchor] + section + card[anchor:])


def load_hint(base: str) -> str:
    """One line telling a plain PEFT user how to load an adapter on its base model `base`."""
    from divrl.models import EMBEDDED_PREFIX

    load_base = f'divrl.models.resolve_model_name("{base}")' if base.startswith(EMBEDDED_PREFIX) else f'"{base}"'
    note = f" (`{base}` is a divrl name: divrl prepares that model once and returns its path)" if base.startswith(
        EMBEDDED_PREFIX) else ""
    return (f"With plain PEFT: `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained({load_base}), "
            f'"path/to/this/folder")`{note}.')


def saved_name(folder: str) -> str:
    """The name the card gives the saved model: its folder's, or for the final save's staging folder (moved into
    output_dir once complete) output_dir's."""
    from divrl.trainers.checkpoint import FINAL_STAGING

    path = Path(folder).resolve()
    return path.parent.name if path.name == FINAL_STAGING else path.name


def model_card(trainer: Any, folder: str, base: str | None, trained_with: str = GRPO_TRAINER,
               papers: list[dict[str, Any]] | None = None) -> str:
    """divrl's card for what `trainer` saved in `folder`: methods, papers, task, base model, the command that made
    it, the metrics at save, how to load it, and the citations. `trained_with` says which trainer made it;
    `papers` defaults to those of the divrl methods enabled in `trainer.args` (none: GRPO's DeepSeekMath)."""
    from huggingface_hub import ModelCardData

    from divrl.models import EMBEDDED_PREFIX

    papers = distinct_papers(method_cards(trainer.args)[0]) if papers is None else papers
    facts = getattr(trainer, "card_facts", {})
    task = getattr(trainer, "task", None)
    task_text = facts.get("task") or (
        None if task is None else f"{getattr(task, 'name', type(task).__name__)} {getattr(task, 'params', '')}".strip())
    adapter = (Path(folder) / ADAPTER_CONFIG).is_file()
    hub_base = base is not None and not base.startswith(EMBEDDED_PREFIX) and not Path(base).expanduser().exists()
    header = ModelCardData(base_model=base if hub_base else None, library_name="peft" if adapter else "transformers",
                           tags=sorted(set(trainer._tag_names)), model_name=saved_name(folder)).to_yaml()
    rows = [("methods", trainer._name),
            ("papers", "; ".join(p.get("reference", p["title"]) for p in papers)
             or (f"Shao et al. (2024). {trainer._paper['title']}. arXiv:{trainer._paper['id']}"  # TRL's GRPO paper
                 if trained_with == GRPO_TRAINER else "-")),
            ("task", task_text or "-"), ("base model", f"`{base}`" if base else "-"),
            ("command", f"`{facts.get('command') or script_command()}`"),
            ("saved at", f"step {trainer.state.global_step} of {trainer.state.max_steps}")]
    lines = ["---", header, "---", "", f"# {saved_name(folder)}: {trainer._name}", "",
             f"A {'LoRA adapter' if adapter else 'model'} trained with {trained_with}.", "", "| | |", "|---|---|",
             *(f"| {key} | {value} |" for key, value in rows), ""]
    for heading, numbers in metrics_at_save(trainer.state.log_history):
        lines += metrics_section(heading, numbers, HELD_OUT_NOTE if heading.startswith("held-out") else TRAINING_NOTE)
    if adapter and base:
        lines += ["## Loading", "", "divrl resolves the base model: `divrl eval task --model path/to/this/folder "
                  '...`, or `divrl.sampling.load_for_sampling("path/to/this/folder")` in Python.', "",
                  load_hint(base), ""]
    citations = [c for c in [p["citation"] for p in papers] or [trainer._paper.get("citation", "")] if c]
    if citations:
        lines += ["## Citations", "", "```bibtex", "\n\n".join(citations), "```", ""]
    return "\n".join(lines)


def write_model_card(trainer: Any, folder: str, trained_with: str = GRPO_TRAINER,
                     papers: list[dict[str, Any]] | None = None) -> None:
    """After a save into `folder` by the saving process: the base model recorded by its portable name in
    adapter_config.json (atomically), and divrl's card (`model_card`) in README.md in place of PEFT's template or
    TRL's card."""
    from divrl.models import portable_model_name

    peft_config = getattr(trainer.model, "peft_config", None)
    if isinstance(peft_config, dict) and peft_config:
        base = next(iter(peft_config.values())).base_model_name_or_path
    else:
        base = getattr(getattr(trainer.model, "config", None), "_name_or_path", None)
    base = portable_model_name(base) if base else None
    config_file = Path(folder) / ADAPTER_CONFIG
    if base and config_file.is_file():
        config = json.loads(config_file.read_text())
        if config.get("base_model_name_or_path") != base:
            config["base_model_name_or_path"] = base
            partial = config_file.with_name(config_file.name + ".partial")
            partial.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            os.replace(partial, config_file)
    (Path(folder) / CARD_FILE).write_text(model_card(trainer, folder, base, trained_with, papers))
