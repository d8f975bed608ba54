"""Boolean domain: reference sizes, mechanistic keys, the fixed depth/NOR inconsistencies, parsing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from divrl.tasks.hypospace.boolean import ROWS, BooleanTask


@pytest.mark.parametrize(("operators", "keys", "functions"), [("basic", 10, 4), ("extended", 34, 14), ("full", 65, 16)])
def test_reference_sizes_at_depth_2(operators: str, keys: int, functions: int) -> None:
    task = BooleanTask(operators, 2)
    assert len(task.hypothesis_space()) == keys
    assert len(set(task.table_of.values())) == functions


def test_extended_depth_2_has_the_78_observation_sets_of_the_ips_paper() -> None:
    instances = BooleanTask("extended", 2).instances()
    assert len(instances) == 78
    assert {len(i.observations) for i in instances} == {1, 2, 3, 4}


def test_admissible_sets_are_exactly_the_consistent_keys() -> None:
    task = BooleanTask("full", 2)
    for instance in task.instances():
        consistent = {k for k in task.hypothesis_space() if task.is_consistent(k, instance.observations)}
        assert consistent == set(instance.hypotheses)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x AND y", "y AND x"),  # commutativity
        ("(x AND y) AND NOT x", "x AND (y AND NOT x)"),  # associativity
        ("x OR x OR y", "x OR y"),  # idempotence
        ("AND(x, y)", "x ∧ y"),
    ],
)
def test_mechanistically_equal_expressions_share_a_key(a: str, b: str) -> None:
    task = BooleanTask("extended", 2)
    assert task.parse(a) is not None and task.parse(a) == task.parse(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x AND (x OR y)", "x"),  # no absorption
        ("NOT (x AND y)", "NOT x OR NOT y"),  # no De Morgan
        ("NOT NOT x", "x"),  # no double negation
    ],
)
def test_only_mechanistic_rules_identify_expressions(a: str, b: str) -> None:
    task = BooleanTask("extended", 2)
    assert task.parse(a) is not None and task.parse(b) is not None
    assert task.parse(a) != task.parse(b)


def test_nor_has_depth_one_in_generator_and_validator() -> None:
    task = BooleanTask("full", 1)
    assert task.depth_of["NOR(x,y)"] == 1
    assert task.parse("Expression: NOR(x, y)") == "NOR(x,y)"
    # Same key, so the same hypothesis: its depth is that of its shallowest spelling, NOR(x, y).
    assert task.parse("Expression: NOT (x OR y)") == "NOR(x,y)"
    assert task.parse("Expression: NOT (x AND y)") is None  # depth 2, and no shallower spelling exists


def test_nor_is_only_used_where_allowed() -> None:
    extended = BooleanTask("extended", 2)
    assert extended.parse("NOT (x OR y)") == "NOT(OR(x,y))"
    assert extended.parse("NOR(x, y)") is None
    assert BooleanTask("basic", 2).parse("NOT x") is None
    assert all("NOR" not in key for key in extended.hypothesis_space())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Expression: (x OR y) AND NOT x", "AND(NOT(x),OR(x,y))"),
        ("The answer is below.\nExpression: `x & !y`", "AND(NOT(y),x)"),
        ("$\\neg (x \\lor y)$", "NOT(OR(x,y))"),
        ("\\(\\lnot x \\land y\\)", "AND(NOT(x),y)"),
        ("x \\wedge \\neg y", "AND(NOT(y),x)"),
        ("~x | y", "OR(NOT(x),y)"),
        ("x && !y", "AND(NOT(y),x)"),
        ("Expression: **x AND NOT y**", "AND(NOT(y),x)"),
        ("```\nx OR y\n```", "OR(x,y)"),
        ("expression: ((((x))))", "x"),
        ("Expression: x ∨ ¬x.", "OR(NOT(x),x)"),
        ("Expression: not x and y", "AND(NOT(x),y)"),
        ("Expression: x AND y OR NOT x", "OR(AND(x,y),NOT(x))"),
    ],
)
def test_parse_accepts_usual_noise(text: str, expected: str) -> None:
    assert BooleanTask("extended", 2).parse(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Expression:\n(x OR y)\nAND NOT x", "AND(NOT(x),OR(x,y))"),  # goes on with an operator
        ("Expression: (x OR y) AND\nNOT x", "AND(NOT(x),OR(x,y))"),  # ends with an operator
        ("Expression: AND(x,\n\ny)", "AND(x,y)"),  # an open parenthesis
        ("Expression: x AND y\nThis matches every row.", "AND(x,y)"),  # prose after the answer
        ("Expression: x AND y\nExpression: x OR y", "AND(x,y)"),
    ],
)
def test_answer_continues_over_lines(text: str, expected: str) -> None:
    assert BooleanTask("extended", 2).parse(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Expression: x' AND y", "AND(NOT(x),y)"),  # postfix prime = NOT, as Boolean algebra writes it
        ("Expression: (x + y)'", "NOT(OR(x,y))"),
        ("Expression: x′ ∧ y’", "AND(NOT(x),NOT(y))"),
        ("Expression: x''", "NOT(NOT(x))"),
        ("Expression: NOT x'", "NOT(NOT(x))"),
    ],
)
def test_postfix_prime_is_not(text: str, expected: str) -> None:
    assert BooleanTask("extended", 2).parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Expression: x AND y\nOR maybe not",  # a continuation that cannot be read
        "Expression: (x OR\ny is my guess",
        "Expression: x" + " " * 5000 + "AND y",  # longer than the cap: unreadable, not cut to x
        "Expression: 'x AND y'",  # a quote is not noise: it would be read as x AND NOT y
        "Expression: x" + "'" * 300,  # nesting is bounded
    ],
)
def test_unreadable_continuations_quotes_and_overlong_answers_give_none(text: str) -> None:
    assert BooleanTask("extended", 2).parse(text) is None


def test_prime_counts_as_a_written_not() -> None:
    assert BooleanTask("basic", 2).parse("Expression: x' AND y") is None


@pytest.mark.parametrize(
    "line", ["(x=2, y=0) -> 1", "(x=0, y=0) -> 2", "(x=0,y=0) -> 1", "(x=0, y=0) => 1", "x=0 y=0 -> 1", "", None]
)
def test_malformed_observations_are_a_value_error_naming_the_line(line: object) -> None:
    task = BooleanTask("extended", 2)
    for hypothesis in ("x", "garbage"):
        with pytest.raises(ValueError, match=f"malformed boolean observation {re.escape(repr(line))}"):
            task.is_consistent(hypothesis, ["(x=0, y=0) -> 1", line])


@pytest.mark.parametrize(
    "text",
    ["x XOR y", "True", "x AND 1", "z", "x AND", "(x", "x)", "AND(x)", "x y", "NOT", "", "x AND (y OR (x AND NOT y))"],
)
def test_parse_rejects_what_is_outside_the_space(text: str) -> None:
    assert BooleanTask("extended", 2).parse(text) is None


@pytest.mark.parametrize("operators", ["basic", "extended", "full"])
def test_render_parse_round_trip(operators: str) -> None:
    task = BooleanTask(operators, 3 if operators != "full" else 2)
    for key in task.hypothesis_space():
        assert task.parse(key) == key
        assert task.parse(task.render_answer(key)) == key


def test_descriptor_depth_and_operator_mix() -> None:
    task = BooleanTask("extended", 2)
    assert task.descriptor("x") == (0.0, 0.0, 0.0)
    assert task.descriptor("AND(x,y)") == (0.5, 0.0, 1.0)
    assert task.descriptor("AND(NOT(x),OR(x,y))") == (1.0, 1 / 3, 0.5)
    assert BooleanTask("full", 2).descriptor("NOR(x,y)") == (0.5, 1.0, 0.0)


def test_parameters_out_of_range_are_named() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        BooleanTask("extended", 4)
    with pytest.raises(ValueError, match="operator set"):
        BooleanTask("xor", 2)


# Random expression trees, written with random surface syntax, parsed back: the key's truth table must be
# the tree's, and every tree within the space's depth must be readable.
_VARS = st.sampled_from(["x", "y"])
_SPELLING = {
    "AND": ["AND", "and", "&", "∧", "\\land"],
    "OR": ["OR", "or", "|", "∨", "\\lor"],
    "NOT": ["NOT ", "not ", "!", "¬", "\\neg "],
}


def _trees(depth: int) -> st.SearchStrategy:
    if depth == 0:
        return _VARS.map(lambda v: ("VAR", v))
    sub = _trees(depth - 1)
    return st.one_of(
        sub,
        sub.map(lambda t: ("NOT", t)),
        st.tuples(st.sampled_from(["AND", "OR"]), sub, sub).map(lambda t: (t[0], t[1], t[2])),
    )


def _write(tree: tuple, choice: st.DataObject) -> str:
    if tree[0] == "VAR":
        return tree[1]
    if tree[0] == "NOT":
        return f"{choice.draw(st.sampled_from(_SPELLING['NOT']))}({_write(tree[1], choice)})"
    op = choice.draw(st.sampled_from(_SPELLING[tree[0]]))
    if choice.draw(st.booleans()) and op.isalpha():
        return f"{op.upper()}({_write(tree[1], choice)}, {_write(tree[2], choice)})"
    return f"({_write(tree[1], choice)} {op} {_write(tree[2], choice)})"


def _table(tree: tuple) -> int:
    if tree[0] == "VAR":
        return 0b1100 if tree[1] == "x" else 0b1010
    if tree[0] == "NOT":
        return ~_table(tree[1]) & 0b1111
    a, b = _table(tree[1]), _table(tree[2])
    return a & b if tree[0] == "AND" else a | b


def _depth(tree: tuple) -> int:
    return 0 if tree[0] == "VAR" else 1 + max(_depth(t) for t in tree[1:])


EXTENDED_2 = BooleanTask("extended", 2)


@settings(max_examples=300, deadline=None)
@given(tree=_trees(3), choice=st.data())
def test_parsed_keys_keep_the_truth_table(tree: tuple, choice: st.DataObject) -> None:
    key = EXTENDED_2.parse("Expression: " + _write(tree, choice))
    if _depth(tree) <= 2:
        assert key is not None
    if key is not None:
        assert EXTENDED_2.table_of[key] == _table(tree)
        assert EXTENDED_2.is_consistent(
            key, [f"(x={x}, y={y}) -> {_table(tree) >> i & 1}" for i, (x, y) in enumerate(ROWS)]
        )
