"""Boolean expression discovery over two variables x, y from a partial truth table.

Operator sets: basic {AND, OR}, extended {AND, OR, NOT}, full {AND, OR, NOT, NOR}. Expressions are
built by depth: depth 0 = {x, y}; depth d adds NOT(e) and op(a, b) over expressions of depth < d (and
keeps all lower depths); no constants. Two expressions are one hypothesis iff their mechanistic keys
are equal: AND/OR chains flattened (associativity), children of commutative operators sorted,
duplicate AND/OR children removed (idempotence), NOR(a, b) = NOT(OR(a, b)). No absorption,
distributivity or De Morgan. Depth 2 sizes: basic 10 keys (4 functions), extended 34 (14), full 65 (16).
An observation set is k of the four rows `(x=0, y=1) -> 1` (k = 1..4); H_O = the keys matching them.

Canonical hypothesis: the prefix form of the key, e.g. `OR(NOT(x),y)`, children sorted as strings;
NOT(OR(...)) is written NOR(...) only when NOR is an allowed operator.

Two inconsistencies of the reference code are fixed here, with one definition used everywhere:
- Depth: the reference generator counts NOR(x, y) as depth 1 while its validator counts it as depth 2
  (it sees NOT(OR(x, y))). Here the depth of a hypothesis is the smallest generation depth of any
  expression with its key, and validity is membership of the key in the enumerated space, so generator
  and validator cannot disagree (NOR(x, y) has depth 1 in both).
- NOR where it is not allowed: the reference maps a written NOT(x OR y) to NOR and then rejects it in
  operator sets without NOR. Here the allowed-operator check applies to the operators the answer
  actually writes: NOT(x OR y) is fine with {AND, OR, NOT}; a written NOR is rejected there.
The parser is a small recursive-descent grammar with a nesting limit; model output is never evaluated.
Besides AND/OR/NOT/NOR words it reads the usual symbols (& | ! ~ ∧ ∨ ¬, LaTeX \\land \\lor \\lnot, + and ·
of Boolean algebra) and a postfix prime as complement, as Boolean algebra writes it: x' = NOT x, (x + y)'
= NOT (x OR y); a quote in any other place makes the answer unreadable, never dropped as noise. An
expression may go on over following lines when a line ends with an operator, a comma or an open
parenthesis, or the next line starts with a binary operator, a comma or a closing parenthesis; anything
unreadable in such a continuation makes the whole answer unreadable.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from divrl.tasks.hypospace.common import (
    MAX_ANSWER_CHARS,
    HypoSpaceTask,
    answer_lines,
    answer_region,
    check_int,
    match_observation,
)

OPERATOR_SETS: dict[str, frozenset[str]] = {
    "basic": frozenset({"AND", "OR"}),
    "extended": frozenset({"AND", "OR", "NOT"}),
    "full": frozenset({"AND", "OR", "NOT", "NOR"}),
}
MAX_DEPTH = 3  # depth 4 has tens of millions of keys
MAX_NESTING = 32  # deeper parse trees cannot be in any space with depth <= MAX_DEPTH after flattening
MAX_TOKENS = 400
ROWS = ((0, 0), (0, 1), (1, 0), (1, 1))  # truth tables are 4-bit ints, bit i = output on ROWS[i]
VARIABLE_TABLES = {"x": 0b1100, "y": 0b1010}
_LABEL = re.compile(r"expression\s*:", re.IGNORECASE)
_TOKEN = re.compile(
    r"""\s*(?:
      (?P<and>&&|&|∧|⋀|·|\\land\b|\\wedge\b)
    | (?P<or>\|\||\||∨|⋁|\+|\\lor\b|\\vee\b)
    | (?P<not>¬|~|!|\\lnot\b|\\neg\b)
    | (?P<nor>⊽|↓)
    | (?P<prime>'|′|’)
    | (?P<skip>\\left\b|\\right\b|\\[()\[\]]|\\[,;!\ ]|\$|`|\*|")
    | (?P<lp>[(\[{])
    | (?P<rp>[)\]}])
    | (?P<comma>,)
    | (?P<word>[A-Za-z]+)
    )""",
    re.VERBOSE,
)
_OBSERVATION = re.compile(r"\(x=([01]), y=([01])\) -> ([01])")
_WORDS = {"and": "and", "or": "or", "not": "not", "nor": "nor", "x": "var", "y": "var"}

# A key node: (operator, children, rendered prefix string); operator in VAR / NOT / AND / OR.
Node = tuple[str, tuple[Any, ...], str]
# Token kinds after which an expression cannot end, and those a continuation line can start with.
_OPEN_KINDS = frozenset({"and", "or", "nor", "not", "lp", "comma"})
_CONTINUING_KINDS = frozenset({"and", "or", "nor", "rp", "comma"})


class _Unreadable(Exception):
    """Raised inside the parser; `parse` turns it into None."""


def _iter_tokens(line: str) -> Iterator[tuple[str, str]]:
    """(kind, text) tokens of one line, lazily; _Unreadable at the first character outside the grammar."""
    pos = 0
    line = line.rstrip(" .;")
    while pos < len(line):
        match = _TOKEN.match(line, pos)
        if match is None:
            raise _Unreadable
        pos = match.end()
        kind = match.lastgroup
        if kind == "skip":
            continue
        text = match.group(kind)
        if kind == "word":
            kind = _WORDS.get(text.lower(), "")
            if not kind:
                raise _Unreadable
            text = text.lower()
        yield kind, text


def _tokens(line: str) -> list[tuple[str, str]]:
    """All tokens of `line`; _Unreadable past MAX_TOKENS."""
    tokens: list[tuple[str, str]] = []
    for token in _iter_tokens(line):
        tokens.append(token)
        if len(tokens) > MAX_TOKENS:
            raise _Unreadable
    return tokens


def _continues(tokens: list[tuple[str, str]], line: str) -> bool:
    """Whether `line` goes on with the expression `tokens`: they end open (an operator, a comma, an unclosed
    parenthesis) or the line starts with a token that only continues an expression (a binary operator, ...)."""
    kinds = [kind for kind, _ in tokens]
    if kinds and kinds[-1] in _OPEN_KINDS or kinds.count("lp") > kinds.count("rp"):
        return True
    try:
        kind, _ = next(_iter_tokens(line), ("end", ""))
    except _Unreadable:
        return False
    return kind in _CONTINUING_KINDS


def _answer_tokens(text: str) -> list[tuple[str, str]]:
    """Tokens of the first non-blank line after the label and of the lines that continue it; _Unreadable when a
    continuation cannot be read or the answer runs past MAX_ANSWER_CHARS / MAX_TOKENS."""
    tokens: list[tuple[str, str]] = []
    length = 0
    for number, line in enumerate(answer_lines(answer_region(text, _LABEL))):
        if number and not _continues(tokens, line):
            break
        length += len(line)
        if length > MAX_ANSWER_CHARS:
            raise _Unreadable
        tokens += _tokens(line)
        if len(tokens) > MAX_TOKENS:
            raise _Unreadable
    return tokens


class _Parser:
    """Recursive descent over `or := and ((OR|NOR) and)*`, `and := unary (AND unary)*`,
    `unary := NOT unary | atom PRIME*` (PRIME = a postfix '), `atom := var | (expr) | OP(expr, ...)`, with a
    nesting limit."""

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.used: set[str] = set()

    def peek(self) -> str:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else "end"

    def take(self, kind: str) -> str:
        if self.peek() != kind:
            raise _Unreadable
        self.pos += 1
        return self.tokens[self.pos - 1][1]

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _Unreadable

    def parse(self) -> tuple:
        tree = self.expr()
        if self.peek() != "end":
            raise _Unreadable
        return tree

    def expr(self) -> tuple:
        self.enter()
        tree = self.conjunction()
        while self.peek() in ("or", "nor"):
            op = self.peek()
            self.take(op)
            self.used.add(op.upper())
            tree = (op.upper(), [tree, self.conjunction()])
        self.depth -= 1
        return tree

    def conjunction(self) -> tuple:
        tree = self.unary()
        while self.peek() == "and":
            self.take("and")
            self.used.add("AND")
            tree = ("AND", [tree, self.unary()])
        return tree

    def unary(self) -> tuple:
        if self.peek() != "not":
            return self.postfix()
        self.take("not")
        self.used.add("NOT")
        self.enter()
        tree = ("NOT", [self.unary()])
        self.depth -= 1
        return tree

    def postfix(self) -> tuple:
        tree = self.atom()
        primes = 0
        while self.peek() == "prime":  # x' = NOT x
            self.take("prime")
            self.used.add("NOT")
            self.enter()
            primes += 1
            tree = ("NOT", [tree])
        self.depth -= primes
        return tree

    def atom(self) -> tuple:
        kind = self.peek()
        if kind == "var":
            return ("VAR", self.take("var"))
        if kind == "lp":
            self.take("lp")
            tree = self.expr()
            self.take("rp")
            return tree
        if kind in ("and", "or", "nor"):  # prefix call: AND(a, b, ...)
            self.take(kind)
            op = kind.upper()
            self.used.add(op)
            self.take("lp")
            args = [self.expr()]
            while self.peek() == "comma":
                self.take("comma")
                args.append(self.expr())
            self.take("rp")
            if len(args) < 2:
                raise _Unreadable
            return (op, args)
        raise _Unreadable


class BooleanTask(HypoSpaceTask):
    """HypoSpace Boolean discovery with an operator set (basic/extended/full) and a maximum depth."""

    domain = "boolean"
    answer_label = "Expression:"
    behavior_dims = 3
    behavior_names = ("depth", "negation_share", "and_share")

    def __init__(self, operators: str = "extended", max_depth: int = 2, format_reward: float = 0.0) -> None:
        super().__init__(format_reward)
        if operators not in OPERATOR_SETS:
            raise ValueError(f"unknown operator set {operators!r}; choose one of {sorted(OPERATOR_SETS)}")
        self.operators = operators
        self.allowed = OPERATOR_SETS[operators]
        self.max_depth = check_int("max_depth", max_depth, 1, MAX_DEPTH)
        self._nor_form = "NOR" in self.allowed
        self.depth_of: dict[str, int] = {}  # canonical key -> smallest generation depth
        self.table_of: dict[str, int] = {}  # canonical key -> truth table
        self._enumerate_space()

    @property
    def params(self) -> dict[str, Any]:
        return {"operators": self.operators, "max_depth": self.max_depth}

    @property
    def tag(self) -> str:
        return f"{self.operators}-d{self.max_depth}"

    # -- keys --------------------------------------------------------------------------------------------
    def _var(self, name: str) -> Node:
        return ("VAR", (), name)

    def _not(self, child: Node) -> Node:
        if child[0] == "OR" and self._nor_form:
            return ("NOT", (child,), "NOR(" + child[2][3:])
        return ("NOT", (child,), f"NOT({child[2]})")

    def _assoc(self, op: str, items: Iterable[Node]) -> Node:
        """AND/OR node with flattening, idempotence and sorted children; a single child stands alone."""
        children: dict[str, Node] = {}
        for item in items:
            for child in item[1] if item[0] == op else (item,):
                children[child[2]] = child
        if len(children) == 1:
            return next(iter(children.values()))
        ordered = tuple(children[k] for k in sorted(children))
        return (op, ordered, f"{op}({','.join(c[2] for c in ordered)})")

    def _key(self, tree: tuple) -> Node:
        op, args = tree
        if op == "VAR":
            return self._var(args)
        if op == "NOT":
            return self._not(self._key(args[0]))
        children = [self._key(a) for a in args]
        if op == "NOR":
            return self._not(self._assoc("OR", children))
        return self._assoc(op, children)

    def _table(self, node: Node) -> int:
        op, children, name = node
        if op == "VAR":
            return VARIABLE_TABLES[name]
        if op == "NOT":
            return ~self._table(children[0]) & 0b1111
        tables = [self._table(c) for c in children]
        out = tables[0]
        for t in tables[1:]:
            out = out & t if op == "AND" else out | t
        return out

    def _enumerate_space(self) -> None:
        """All keys up to max_depth with their smallest depth and truth table."""
        level: dict[str, Node] = {n: self._var(n) for n in ("x", "y")}
        self.depth_of = dict.fromkeys(level, 0)
        binary = sorted(self.allowed - {"NOT"})
        for depth in range(1, self.max_depth + 1):
            lower = list(level.values())
            new: list[Node] = []
            if "NOT" in self.allowed:
                new += [self._not(e) for e in lower]
            for a, b in itertools.combinations_with_replacement(lower, 2):
                for op in binary:
                    new.append(self._not(self._assoc("OR", (a, b))) if op == "NOR" else self._assoc(op, (a, b)))
            for node in new:
                if node[2] not in self.depth_of:
                    self.depth_of[node[2]] = depth
                    level[node[2]] = node
        self.table_of = {key: self._table(node) for key, node in level.items()}

    def hypothesis_space(self) -> list[str]:
        """Every key of the space (up to max_depth), sorted."""
        return sorted(self.depth_of)

    def enumerate(self) -> Iterable[tuple[list[str], list[str]]]:
        keys = self.hypothesis_space()
        for k in range(1, len(ROWS) + 1):
            for rows in itertools.combinations(range(len(ROWS)), k):
                groups: dict[tuple[int, ...], list[str]] = {}
                for key in keys:
                    groups.setdefault(tuple(self.table_of[key] >> r & 1 for r in rows), []).append(key)
                for outputs in sorted(groups):
                    lines = [_row_line(r, o) for r, o in zip(rows, outputs, strict=True)]
                    yield lines, groups[outputs]

    # -- reading answers ---------------------------------------------------------------------------------
    def read_answer(self, text: str) -> str | None:
        try:
            parser = _Parser(_answer_tokens(text))
            tree = parser.parse()
        except _Unreadable:
            return None
        if not parser.used <= self.allowed:
            return None
        key = self._key(tree)[2]
        return key if key in self.depth_of else None

    def is_hypothesis(self, hypothesis: Any) -> bool:
        return isinstance(hypothesis, str) and hypothesis in self.depth_of

    def read_observation(self, line: Any) -> tuple[int, int]:
        """(row index into ROWS, output) of `(x=0, y=1) -> 1`."""
        match = match_observation(self.domain, _OBSERVATION, line, _row_line(1, 1))
        x, y, out = (int(g) for g in match.groups())
        return ROWS.index((x, y)), out

    def reproduces(self, hypothesis: str, observations: Sequence[tuple[int, int]]) -> bool:
        table = self.table_of[hypothesis]
        return all(table >> row & 1 == out for row, out in observations)

    def describe(self, hypothesis: str) -> tuple[float, ...]:
        nor = hypothesis.count("NOR(")
        negations = hypothesis.count("NOT(") + nor
        ands = hypothesis.count("AND(")
        binary = ands + hypothesis.count("OR(")  # "OR(" also counts every "NOR("
        operators = negations + binary - nor
        return (
            self.depth_of[hypothesis] / self.max_depth,
            negations / operators if operators else 0.0,
            ands / binary if binary else 0.0,
        )

    # -- prompts ---------------------------------------------------------------------------------------
    def rules(self) -> str:
        names = {"AND": "AND", "OR": "OR", "NOT": "NOT", "NOR": "NOR (NOR(a, b) means NOT (a OR b))"}
        ops = ", ".join(names[op] for op in ("AND", "OR", "NOT", "NOR") if op in self.allowed)
        return (
            f"Boolean expression discovery. Variables: x, y. Operators: {ops}. No constants. Depth: x and y have "
            "depth 0; an operator applied to arguments has depth one more than its deepest argument; the "
            f"expression's depth must be at most {self.max_depth}. Expressions that differ only in argument "
            "order, grouping of a repeated AND/OR, or repeated AND/OR arguments are the same hypothesis."
        )

    def observation_block(self, observations: Sequence[str]) -> str:
        return "Observations (input -> output):\n" + "\n".join(observations)

    def render_answer(self, hypothesis: str) -> str:
        tree = _Parser(_tokens(hypothesis)).parse()
        return f"Expression: {_infix(tree)}"

    def format_example(self) -> str:
        return "Expression: (x OR y) AND NOT x" if "NOT" in self.allowed else "Expression: (x OR y) AND x"


def _row_line(row: int, output: int) -> str:
    x, y = ROWS[row]
    return f"(x={x}, y={y}) -> {output}"


def _infix(tree: tuple) -> str:
    """Readable infix form of a parse tree (used to show hypotheses to models)."""
    op, args = tree
    if op == "VAR":
        return args
    if op == "NOT":
        inner = _infix(args[0])
        return f"NOT {inner}" if args[0][0] in ("VAR", "NOT") else f"NOT ({inner})"
    if op == "NOR":
        return f"NOR({', '.join(_infix(a) for a in args)})"
    parts = [_infix(a) if a[0] in ("VAR", "NOT", "NOR") else f"({_infix(a)})" for a in args]
    return f" {op} ".join(parts)
