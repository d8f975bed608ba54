"""What a divrl run's model card and model tags say: the methods that ran and the papers they come from.

TRL builds the card from three trainer attributes (`_name`, `_paper`, `_tag_names`); GRPOTrainer's class values
name GRPO and cite DeepSeekMath. `DivRLTrainer` sets them per instance from its config with `model_card_identity`,
which reads each enabled method's `Card` from the registry (`divrl.methods`).
Without any method the run IS GRPO and keeps GRPOTrainer's values (plus the `divrl` tag).
"""

from __future__ import annotations

from typing import Any

from divrl.methods import Stage, active


def model_card_identity(args: Any, grpo_tags: list[str], grpo_name: str, grpo_paper: dict[str, Any]
                        ) -> tuple[list[str], str, dict[str, Any]]:
    """(`_tag_names`, `_name`, `_paper`) for a run with config `args`: the enabled methods joined with " + ", the
    paper they come from (its title and arXiv id only when exactly one paper is involved, else none, so the card
    never credits one paper with a combination) and every distinct citation; GRPOTrainer's own values when no
    method is on. A run whose methods all replace GRPO's objective (FlowRL) is not tagged `grpo`."""
    cards, replaces_grpo = {}, True
    for method in active(args):
        card = method.card_for(args)
        if card is not None:
            cards.setdefault(card.name, card)  # one entry per card: MaxEnt-GRPO's three parts are one method
            replaces_grpo = replaces_grpo and method.stage is Stage.OBJECTIVE
    if not cards:
        return [*grpo_tags, "divrl"], grpo_name, grpo_paper
    tags = ["trl", "divrl", *(card.tag for card in cards.values())]
    if not replaces_grpo:
        tags.insert(1, "grpo")
    papers = list({id(card.paper): card.paper for card in cards.values()}.values())
    paper = {"citation": "\n\n".join(p["citation"] for p in papers)}
    if len(papers) == 1 and papers[0]["id"] is not None:
        paper.update(title=papers[0]["title"], id=papers[0]["id"])
    return tags, " + ".join(cards), paper
