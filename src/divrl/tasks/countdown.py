"""Countdown: given numbers and a target, write an arithmetic expression that uses each number exactly once and equals
the target. Many expressions solve an instance, which is where diversity matters; it is also a worked example of a
divrl task (`reward_funcs`, `train_dataset`, `outcome_key`, `stop_strings`: see README, "Your own task").

Instances are generated offline from `seed`: `count` numbers in [1, max_number], and a target that at least
`min_solutions` distinct expressions reach (exhaustive search over expression trees, exact rational arithmetic).
Answers are read with a small grammar of our own (numbers, + - * /, parentheses; nothing is evaluated as code) and
checked exactly; the outcome key is the expression's canonical form (commutative and associative chains of + and *
flattened and sorted), so `(3 + 5) * 2` and `2 * (5 + 3)` are one outcome and `3 * 2 + 5 * 2` another. QD's
behaviour descriptor is the operator mix of a correct expression (shares of * or / and of - or /).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from divrl.task import completion_text

MAX_ANSWER_CHARS = 200  # a longer answer line is unreadable, not parsed
ANSWER_LABEL = "Answer:"
_TOKEN = re.compile(r"\s*(?:(\d{1,6})|([-+*/×x÷()]))")
_OPS = "+-*/"
Expr = tuple  # ("n", value) or (op, left, right)


def _tokens(text: str) -> list[str] | None:
    """Numbers and operators of `text` (× and ÷ read as * and /), or None if anything else is there."""
    tokens, pos = [], 0
    text = text.strip().rstrip(".").rstrip("=").strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            return None
        tokens.append(match.group(1) or {"×": "*", "x": "*", "÷": "/"}.get(match.group(2), match.group(2)))
        pos = match.end()
    return tokens


def parse_expression(text: str) -> Expr | None:
    """The expression tree of `text` (recursive descent, usual precedence, left associative), or None."""
    if len(text) > MAX_ANSWER_CHARS:
        return None
    tokens = _tokens(text)
    if not tokens:
        return None
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def atom(depth: int) -> Expr | None:
        token = peek()
        if token is None or depth > 50:
            return None
        if token == "(":
            take()
            inner = sum_(depth + 1)
            return inner if inner is not None and peek() == ")" and take() else None
        return ("n", int(take())) if token.isdigit() else None

    def chain(operand: Any, ops: str) -> Any:
        """A left-associative chain of `operand`s joined by `ops` (one precedence level)."""

        def parse(depth: int) -> Expr | None:
            left = operand(depth)
            while left is not None and peek() is not None and peek() in ops:
                op = take()
                right = operand(depth)
                left = None if right is None else (op, left, right)
            return left

        return parse

    product = chain(atom, "*/")
    sum_ = chain(product, "+-")

    tree = sum_(0)
    return tree if tree is not None and position == len(tokens) else None


def value(tree: Expr) -> Fraction | None:
    """Exact value of a tree (None on a division by zero)."""
    if tree[0] == "n":
        return Fraction(tree[1])
    left, right = value(tree[1]), value(tree[2])
    if left is None or right is None:
        return None
    if tree[0] == "/":
        return None if right == 0 else left / right
    return {"+": left + right, "-": left - right, "*": left * right}[tree[0]]


def leaves(tree: Expr) -> list[int]:
    return [tree[1]] if tree[0] == "n" else leaves(tree[1]) + leaves(tree[2])


def operators(tree: Expr) -> list[str]:
    return [] if tree[0] == "n" else [tree[0], *operators(tree[1]), *operators(tree[2])]


def canonical(tree: Expr) -> str:
    """Canonical form: chains of + (and of *) flattened with their operands sorted; - and / kept in order."""
    if tree[0] == "n":
        return str(tree[1])
    if tree[0] in "+*":
        operands: list[str] = []

        def gather(node: Expr) -> None:
            if node[0] == tree[0]:
                gather(node[1])
                gather(node[2])
            else:
                operands.append(canonical(node))

        gather(tree)
        return "(" + tree[0].join(sorted(operands)) + ")"
    return f"({canonical(tree[1])}{tree[0]}{canonical(tree[2])})"


@lru_cache(maxsize=4096)
def solutions(numbers: tuple[int, ...]) -> dict[Fraction, frozenset[str]]:
    """Every value reachable using each of `numbers` exactly once, with the canonical forms reaching it."""
    found: dict[Fraction, set[str]] = {}

    def trees(items: tuple[int, ...]) -> list[Expr]:
        if len(items) == 1:
            return [("n", items[0])]
        out = []
        for split in range(1, len(items)):
            for left in trees(items[:split]):
                for right in trees(items[split:]):
                    out.extend((op, left, right) for op in _OPS)
        return out

    for order in set(itertools.permutations(numbers)):
        for tree in trees(order):
            result = value(tree)
            if result is not None:
                found.setdefault(result, set()).add(canonical(tree))
    return {v: frozenset(forms) for v, forms in found.items()}


class CountdownTask:
    """Countdown instances, an exact verifier, and the canonical expression as outcome."""

    name = "countdown"
    stop_strings = ("\n",)  # the answer is one line
    behavior_dims = 2  # `behavior`: the operator mix of a correct expression

    def __init__(self, count: int = 3, max_number: int = 20, instances: int = 200, min_solutions: int = 2,
                 seed: int = 0, test_fraction: float = 0.5) -> None:
        if not 2 <= count <= 4:
            raise ValueError(f"count must be 2, 3 or 4 numbers, got {count}")
        if max_number < 1 or instances < 1 or min_solutions < 1 or not 0 <= test_fraction < 1:
            raise ValueError("max_number, instances and min_solutions must be >= 1 and test_fraction in [0, 1)")
        self.count, self.test_fraction = count, test_fraction
        rng = random.Random(seed)
        self.instances: list[dict[str, Any]] = []
        seen: set[tuple[tuple[int, ...], int]] = set()  # no instance twice: a repeat could sit in both splits
        for _ in range(100 * instances):
            if len(self.instances) == instances:
                break
            numbers = tuple(sorted(rng.randint(1, max_number) for _ in range(count)))
            targets = [(v, forms) for v, forms in solutions(numbers).items()
                       if v.denominator == 1 and 10 <= v <= 999 and len(forms) >= min_solutions]
            if targets:
                target, forms = rng.choice(sorted(targets))
                if (numbers, int(target)) not in seen:
                    seen.add((numbers, int(target)))
                    self.instances.append({"numbers": list(numbers), "target": int(target), "n_solutions": len(forms)})
        if len(self.instances) < instances:
            raise ValueError(f"only {len(self.instances)} distinct instances with >= {min_solutions} solutions found "
                             f"for count {count}, max_number {max_number}: ask for fewer or widen max_number")

    def prompt_text(self, numbers: Sequence[int], target: int) -> str:
        listed = ", ".join(map(str, numbers))
        return (f"Using the numbers {listed}, each exactly once, and + - * / with parentheses, write an expression "
                f"that equals {target}. Give only the expression on one line after '{ANSWER_LABEL}'.")

    def answer(self, completion: Any) -> str:
        """The answer line: after the last `Answer:` label, else the completion's first line."""
        text = completion_text(completion)[-20 * MAX_ANSWER_CHARS:]
        tail = text.rsplit(ANSWER_LABEL, 1)[1] if ANSWER_LABEL in text else text
        return tail.strip().split("\n", 1)[0]

    def correct_tree(self, completion: Any, numbers: Sequence[int], target: int) -> Expr | None:
        """The parsed answer when it is correct (each number once, value = target), else None."""
        tree = parse_expression(self.answer(completion))
        if tree is None or sorted(leaves(tree)) != sorted(numbers) or value(tree) != target:
            return None
        return tree

    def check(self, completion: Any, numbers: Sequence[int], target: int) -> str | None:
        """The canonical form of a correct answer, else None."""
        tree = self.correct_tree(completion, numbers, target)
        return None if tree is None else canonical(tree)

    def correct(self, completions: Sequence[Any], numbers: Sequence[Sequence[int]], target: Sequence[int],
                **_: Any) -> list[float]:
        """1.0 for a correct expression, else 0.0 (any string is safe)."""
        return [float(self.check(c, n, t) is not None) for c, n, t in zip(completions, numbers, target, strict=True)]

    def reward_funcs(self) -> list:
        return [self.correct]

    def outcome_key(self, completion: Any, numbers: Sequence[int] = (), target: int = 0, **_: Any) -> str | None:
        """IPS / count-bonus outcome: the canonical correct expression (None when wrong)."""
        return self.check(completion, numbers, target)

    def behavior(self, completion: Any, numbers: Sequence[int] = (), target: int = 0, **_: Any
                 ) -> tuple[float, float] | None:
        """QD descriptor in [0, 1]^2 of a correct expression, its operator mix: the share of its operators that
        multiply or divide, and the share that subtract or divide (None when wrong)."""
        tree = self.correct_tree(completion, numbers, target)
        if tree is None:
            return None
        ops = operators(tree)
        return sum(op in "*/" for op in ops) / len(ops), sum(op in "-/" for op in ops) / len(ops)

    def worked_example(self, index: int, seed: int) -> str:
        """Instance `index` as a solved base-prompt block: its question and one of its solutions (drawn with seed)."""
        instance = self.instances[index]
        forms = sorted(solutions(tuple(sorted(instance["numbers"])))[Fraction(instance["target"])])
        shown = random.Random(f"{seed}-{index}").choice(forms)
        return f"{self.prompt_text(instance['numbers'], instance['target'])}\n{ANSWER_LABEL} {shown[1:-1]}\n\n"

    def train_dataset(self, split: str = "train", style: str = "chat", seed: int = 0, limit: int | None = None,
                      n_exemplars: int = 0, **_: Any) -> Any:
        """`prompt` plus `numbers`, `target` and `n_solutions` (split by `test_fraction`, shuffled with `seed`).

        Base prompts open with `n_exemplars` solved instances of the train split (never the instance itself, never
        a test instance), drawn per instance with `seed`: a small base model rarely solves one zero-shot."""
        from datasets import Dataset

        if split not in ("train", "test", "all") or style not in ("chat", "base"):
            raise ValueError(f"split must be train, test or all and style chat or base, got {split!r}, {style!r}")
        order = list(range(len(self.instances)))
        random.Random(seed).shuffle(order)
        n_test = round(self.test_fraction * len(order))
        train_pool = sorted(order[n_test:])
        if style == "base" and not 0 <= n_exemplars < max(len(train_pool), 1):
            raise ValueError(f"n_exemplars must be in [0, {len(train_pool) - 1}] (the train split's instances, less "
                             f"one), got {n_exemplars}")
        chosen = {"test": order[:n_test], "train": order[n_test:], "all": order}[split][:limit]
        rows = []
        for index in sorted(chosen):
            instance = self.instances[index]
            text = self.prompt_text(instance["numbers"], instance["target"])
            if style == "chat":
                prompt: Any = [{"role": "user", "content": text}]
            else:
                pool = [i for i in train_pool if i != index]
                shots = random.Random(f"{seed}-shots-{index}").sample(pool, n_exemplars)
                prompt = "".join(self.worked_example(i, seed) for i in shots) + f"{text}\n{ANSWER_LABEL}"
            rows.append({"prompt": prompt, **instance})
        return Dataset.from_list(rows)
