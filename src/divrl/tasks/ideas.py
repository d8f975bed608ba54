"""Simulated idea generation (the execution-rewards paper) for language models: an idea is a line of numbers, x in
R^dim.

The completion's `Idea:` line is parsed into x (no evaluation of model output: a bounded number regex),
and rewarded by `divrl.toy.envs.IdeaEnv`: stochastic execution reward (Q(x) + eps) B with peaks whose
ceiling rises with complexity ||x||. Hooks: `behavior` is the execution-rewards paper's b(x) = (sigmoid(||x|| - 3),
angle of (x1, x2)), `outcome_key` its 10 x 10 cell (so IPS counts ideas in the same niche as one
outcome), `embed` the idea vector itself (novelty in idea space, as in the seed).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import torch

from divrl.task import completion_text

# Numbers in an idea are read from the first `Idea:` line only, at most this many characters of it.
MAX_LINE_CHARS = 2000
# Coordinates beyond this magnitude are unreadable garbage, not ideas.
MAX_ABS_COORDINATE = 100.0
OUTCOME_CELLS = 10
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d{1,3})?")
_IDEA_LINE = re.compile(r"idea\s*:\s*([^\n]*)", re.IGNORECASE)

CONTEXTS = (
    "protein folding", "battery chemistry", "reinforcement learning", "climate modelling",
    "drug discovery", "materials design", "robotics", "compilers",
)


class IdeasTask:
    """Ideas as text: prompts for 8 research contexts, a stochastic execution reward, QD/IPS/novelty hooks."""

    name = "ideas"
    behavior_dims = 2

    def __init__(self, dim: int = 16, exec_lambda: float = 1.0, noise: float = 0.3, landscape_seed: int = 0,
                 reward_seed: int = 0) -> None:
        from divrl.toy.envs import IdeaEnv

        self.env = IdeaEnv(dim=dim, exec_lambda=exec_lambda, noise=noise, landscape_seed=landscape_seed)
        self.dim = dim
        self._generator = torch.Generator().manual_seed(reward_seed)

    def parse(self, completion: Any) -> torch.Tensor | None:
        """The idea vector of a completion's first `Idea:` line (else its first line: base prompts end in
        `Idea:`), or None unless that line holds exactly `dim` finite numbers."""
        text = completion_text(completion)[: 20 * MAX_LINE_CHARS]
        match = _IDEA_LINE.search(text)
        line = match.group(1) if match else text.strip().split("\n", 1)[0]
        values = [float(v) for v in _NUMBER.findall(line[:MAX_LINE_CHARS])]
        if len(values) != self.dim or not all(math.isfinite(v) and abs(v) <= MAX_ABS_COORDINATE for v in values):
            return None
        return torch.tensor(values)

    def reward(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        """Execution reward of each idea (stochastic, seeded); 0 for completions without a readable idea."""
        rewards = []
        for completion in completions:
            x = self.parse(completion)
            rewards.append(0.0 if x is None else float(self.env.sample_rewards(x, self._generator)))
        return rewards

    def reward_funcs(self) -> list[Callable[..., list[float]]]:
        """The single execution reward."""
        return [self.reward]

    def behavior(self, completion: Any, **_: Any) -> tuple[float, float] | None:
        """The execution-rewards paper's behaviour descriptor b(x) in [0, 1]^2."""
        x = self.parse(completion)
        return None if x is None else tuple(float(v) for v in self.env.behaviour(x))

    def outcome_key(self, completion: Any, **_: Any) -> tuple[int, int] | None:
        """The 10 x 10 behaviour cell of the idea: ideas in one niche are one outcome for IPS."""
        b = self.behavior(completion)
        return None if b is None else tuple(min(int(v * OUTCOME_CELLS), OUTCOME_CELLS - 1) for v in b)

    def embed(self, completion: Any, **_: Any) -> list[float] | None:
        """The idea vector itself, for kNN novelty in idea space."""
        x = self.parse(completion)
        return None if x is None else x.tolist()

    def prompt_text(self, context: str) -> str:
        """The instruction for one research context."""
        return (f"Propose a research idea in {context}. Describe it as {self.dim} numbers between -10 and 10 "
                f"(larger magnitudes are more ambitious ideas) on one line starting with 'Idea:'.")

    def train_dataset(self, split: str = "train", style: str = "chat", seed: int = 0, limit: int | None = None,
                      n_exemplars: int = 2, **_: Any) -> Any:
        """One row per context (the seed's 8 prompts); 'base' prompts add example ideas drawn from `seed`."""
        from datasets import Dataset

        if style not in ("chat", "base"):
            raise ValueError(f"unknown prompt style {style!r}; choose 'chat' or 'base'")
        generator = torch.Generator().manual_seed(seed)
        rows = []
        for context in CONTEXTS[: limit or len(CONTEXTS)]:
            if style == "chat":
                prompt: Any = [{"role": "user", "content": self.prompt_text(context)}]
            else:
                shots = [torch.randn(self.dim, generator=generator) * 2 for _ in range(n_exemplars)]
                examples = "".join(f"Idea: {', '.join(f'{v:.2f}' for v in x.tolist())}\n" for x in shots)
                prompt = f"{self.prompt_text(context)}\n{examples}Idea:"
            rows.append({"prompt": prompt, "context": context})
        return Dataset.from_list(rows)
