"""The papers behind divrl's methods, as TRL's `_paper` dicts (title, arXiv id, BibTeX citation), for the model
card. Methods name theirs in their `Card`."""

from __future__ import annotations

from typing import Any


def paper(kind: str, key: str, title: str, arxiv: str | None = None, **fields: Any) -> dict[str, Any]:
    """TRL's `_paper` dict (title, arXiv id, BibTeX citation in TRL's layout) plus `reference`: the citation in one
    line (authors, year, title, arXiv id), for a model card's table."""
    entries = {"title": f"{{{title}}}", **fields, **({"eprint": f"arXiv:{arxiv}"} if arxiv else {})}
    body = "".join(f"    {name:<12} = {{{value}}},\n" if name != "year" else f"    {name:<12} = {value},\n"
                   for name, value in entries.items())
    return {"title": title, "id": arxiv, "citation": f"@{kind}{{{key},\n{body}}}",
            "reference": reference(fields.get("author"), fields.get("year"), title, arxiv)}


def reference(author: str | None, year: int | None, title: str, arxiv: str | None) -> str:
    """'Surname, Surname and Surname (year). Title. arXiv:ID' from BibTeX's author list ('Surname, Given and ...';
    more than three authors, or a list ending in 'others': the first one's surname and 'et al.')."""
    names = [name.strip() for name in (author or "").split(" and ") if name.strip()]
    surnames = [name.split(",")[0] if "," in name else name.split()[-1] for name in names if name != "others"]
    if len(surnames) > 3 or (surnames and len(surnames) < len(names)):
        authors = f"{surnames[0]} et al."
    else:
        authors = ", ".join(surnames[:-1]) + (" and " if len(surnames) > 1 else "") + (surnames[-1] if surnames else "")
    parts = [f"{authors or 'Unknown authors'} ({year or 'n.d.'})", title] + ([f"arXiv:{arxiv}"] if arxiv else [])
    return ". ".join(parts)


EXECUTION_REWARDS = paper("misc", "anonymous2026avoiding",
                   "Avoiding Convergence and Diversity Collapse in Reinforcement Learning with Execution Rewards",
                   author="Anonymous", year=2026)
IPS = paper("article", "sinha2026expected", "Expected Return Causes Outcome-Level Mode Collapse in Reinforcement "
            "Learning and How to Fix It with Inverse Probability Scaling", "2601.21669",
            author="Sinha, Abhijeet and Elango, Sundari and Liu, Dianbo", year=2026)
DPH_RL = paper("article", "li2025choice", "The Choice of Divergence: A Neglected Key to Mitigating Diversity "
                 "Collapse in Reinforcement Learning with Verifiable Reward", "2509.07430",
                 author=" and ".join(["Long Li", "Jiaran Hao", "Jason Klein Liu", "Zhijian Zhou", "Yanting Miao",
                                      "Wei Pang", "Xiaoyu Tan", "Wei Chu", "Zhe Wang", "Shirui Pan", "Chao Qu",
                                      "Yuan Qi", "others"]), year=2025)
FLOWRL = paper("article", "zhu2025flowrl", "FlowRL: Matching Reward Distributions for LLM Reasoning", "2509.15207",
               author=" and ".join(["Zhu, Xuekai", "Cheng, Daixuan", "Zhang, Dinghuai", "Li, Hengli", "Zhang, Kaiyan",
                                    "Jiang, Che", "Sun, Youbang", "Hua, Ermo", "Zuo, Yuxin", "Lv, Xingtai",
                                    "Zhang, Qizheng", "Chen, Lin", "Shao, Fanghao", "Xue, Bo", "Song, Yunchong",
                                    "Yang, Zhenjie", "Cui, Ganqu", "Ding, Ning", "Gao, Jianfeng", "Liu, Xiaodong",
                                    "Zhou, Bowen", "Mei, Hongyuan", "Lin, Zhouhan"]), year=2025)
REINVENT = paper("article", "olivecrona2017molecular", "Molecular de-novo design through deep reinforcement learning",
                 "1704.07555", author="Olivecrona, Marcus and Blaschke, Thomas and Engkvist, Ola and Chen, Hongming",
                 journal="Journal of Cheminformatics", year=2017)
AUGMENTED_MEMORY = paper("article", "guo2024augmented", "Augmented Memory: Sample-Efficient Generative Molecular "
                         "Design with Reinforcement Learning", "2305.16160", author="Guo, Jeff and Schwaller, Philippe",
                         journal="JACS Au", year=2024)
SGRPO = paper("article", "ye2026sgrpo", "Pushing Biomolecular Utility-Diversity Frontiers with Supergroup Relative "
              "Policy Optimization", "2605.08659",
              author="Ye, Xinwu and Cao, He and Li, Hao and Feng, Bin and Liu, Zijing and Tang, Xiangru and Li, Yu and "
                     "Gao, Shenghua", year=2026)
OUTCOME_EXPLORATION = paper("article", "song2025outcome", "Outcome-based Exploration for LLM Reasoning",
                              "2509.06941", author="Song, Yuda and Kempe, Julia and Munos, Remi", year=2025)
UNLIKELY = paper("article", "he2025rewarding", "Rewarding the Unlikely: Lifting GRPO Beyond Distribution Sharpening",
                   "2506.02355", author="He, Andre and Fried, Daniel and Welleck, Sean", year=2025)
PASSK = paper("article", "chen2025passk", "Pass@k Training for Adaptively Balancing Exploration and Exploitation of "
                "Large Reasoning Models", "2508.10751",
                author="Chen, Zhipeng and Qin, Xiaobo and Wu, Youbin and Ling, Yue and Ye, Qinghao and Zhao, Wayne Xin "
                       "and Shi, Guang", year=2025)
ENTROPY_MECHANISM = paper("article", "cui2025entropy",
                            "The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
                            "2505.22617",
                            author=" and ".join(["Cui, Ganqu", "Zhang, Yuchen", "Chen, Jiacheng", "Yuan, Lifan",
                                                 "Wang, Zhi", "Zuo, Yuxin", "Li, Haozhan", "Fan, Yuchen", "Chen, Huayu",
                                                 "Chen, Weize", "Liu, Zhiyuan", "Peng, Hao", "Bai, Lei",
                                                 "Ouyang, Wanli",
                                                 "Cheng, Yu", "Zhou, Bowen", "Ding, Ning"]), year=2025)
