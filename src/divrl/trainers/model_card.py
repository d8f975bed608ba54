"""What a divrl run's model card and model tags say: the methods that ran and the papers they come from.

TRL builds the card from three trainer attributes (`_name`, `_paper`, `_tag_names`); GRPOTrainer's class values
name GRPO and cite DeepSeekMath. `DivRLTrainer` sets them per instance from its config with `model_card_identity`.
Without any method the run IS GRPO and keeps GRPOTrainer's values (plus the `divrl` tag).
"""

from __future__ import annotations

from typing import Any


def _paper(kind: str, key: str, title: str, arxiv: str | None = None, **fields: Any) -> dict[str, Any]:
    """TRL's `_paper` dict (title, arXiv id, BibTeX citation in TRL's layout)."""
    entries = {"title": f"{{{title}}}", **fields, **({"eprint": f"arXiv:{arxiv}"} if arxiv else {})}
    body = "".join(f"    {name:<12} = {{{value}}},\n" if name != "year" else f"    {name:<12} = {value},\n"
                   for name, value in entries.items())
    return {"title": title, "id": arxiv, "citation": f"@{kind}{{{key},\n{body}}}"}


_EXECUTION_REWARDS = _paper("misc", "anonymous2026avoiding",
                   "Avoiding Convergence and Diversity Collapse in Reinforcement Learning with Execution Rewards",
                   author="Anonymous", year=2026)
_IPS = _paper("misc", "ipsgrpo", "Expected Return Causes Outcome-Level Mode Collapse in Reinforcement Learning and "
              "How to Fix It with Inverse Probability Scaling")
_DPH_RL = _paper("article", "li2025choice", "The Choice of Divergence: A Neglected Key to Mitigating Diversity "
                 "Collapse in Reinforcement Learning with Verifiable Reward", "2509.07430",
                 author=" and ".join(["Long Li", "Jiaran Hao", "Jason Klein Liu", "Zhijian Zhou", "Yanting Miao",
                                      "Wei Pang", "Xiaoyu Tan", "Wei Chu", "Zhe Wang", "Shirui Pan", "Chao Qu",
                                      "Yuan Qi", "others"]), year=2025)
_FLOWRL = _paper("article", "zhu2025flowrl", "FlowRL: Matching Reward Distributions for LLM Reasoning", "2509.15207",
                 author="Zhu, Xuekai and others", year=2025)
_OUTCOME_EXPLORATION = _paper("article", "song2025outcome", "Outcome-based Exploration for LLM Reasoning",
                              "2509.06941", author="Song, Yuda and Kempe, Julia and Munos, Remi", year=2025)
_UNLIKELY = _paper("article", "he2025rewarding", "Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening",
                   "2506.02355", author="He, Andre and Fried, Daniel and Welleck, Sean", year=2025)
_PASSK = _paper("article", "chen2025passk", "Pass@k Training for Adaptively Balancing Exploration and Exploitation of "
                "Large Reasoning Models", "2508.10751",
                author="Chen, Zhipeng and Qin, Xiaobo and Wu, Youbin and Ling, Yue and Ye, Qinghao and Zhao, Wayne Xin "
                       "and Shi, Guang", year=2025)
_ENTROPY_MECHANISM = _paper("article", "cui2025entropy",
                            "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
                            "2505.22617", author="Cui, Ganqu and others", year=2025)

# (name, tag, paper, enabled?) in the order the card lists them.
_METHODS: tuple[tuple[str, str, dict[str, Any], Any], ...] = (
    ("IPS-GRPO", "ips-grpo", _IPS, lambda a: a.ips),
    ("QD-GRPO", "qd-grpo", _EXECUTION_REWARDS, lambda a: a.qd),
    ("MaxEnt-GRPO", "maxent-grpo", _EXECUTION_REWARDS,
     lambda a: a.maxent_entropy_enabled or a.novelty_enabled or a.length_bins_enabled),
    ("DPH-RL", "dph-rl", _DPH_RL, lambda a: a.divergence_enabled),
    ("Population-GRPO", "population-grpo", _EXECUTION_REWARDS, lambda a: a.population),
    ("FlowRL", "flowrl", _FLOWRL, lambda a: a.flowrl),
    ("Count-bonus GRPO", "count-bonus-grpo", _OUTCOME_EXPLORATION, lambda a: a.count_bonus_enabled),
    ("Unlikeliness GRPO", "unlikeliness-grpo", _UNLIKELY, lambda a: a.unlikeliness_enabled),
    ("Pass@k GRPO", "passk-grpo", _PASSK, lambda a: a.passk_enabled),
    ("Clip-Cov", "clip-cov", _ENTROPY_MECHANISM, lambda a: a.cov_method == "clip_cov"),
    ("KL-Cov", "kl-cov", _ENTROPY_MECHANISM, lambda a: a.cov_method == "kl_cov"),
)


def model_card_identity(args: Any, grpo_tags: list[str], grpo_name: str, grpo_paper: dict[str, Any]
                        ) -> tuple[list[str], str, dict[str, Any]]:
    """(`_tag_names`, `_name`, `_paper`) for a run with config `args`: the enabled methods joined with " + ", the
    paper they come from (its title and arXiv id only when exactly one paper is involved, else none, so the card
    never credits one paper with a combination) and every distinct citation; GRPOTrainer's own values when no
    method is on. FlowRL replaces GRPO's objective, so a FlowRL-only run is not tagged `grpo`."""
    enabled = [(name, tag, paper) for name, tag, paper, on in _METHODS if on(args)]
    if not enabled:
        return [*grpo_tags, "divrl"], grpo_name, grpo_paper
    tags = ["trl", "divrl", *(tag for _, tag, _ in enabled)]
    if any(name != "FlowRL" for name, _, _ in enabled):
        tags.insert(1, "grpo")
    papers = list({id(paper): paper for _, _, paper in enabled}.values())
    paper = {"citation": "\n\n".join(p["citation"] for p in papers)}
    if len(papers) == 1 and papers[0]["id"] is not None:
        paper.update(title=papers[0]["title"], id=papers[0]["id"])
    return tags, " + ".join(name for name, _, _ in enabled), paper
