"""Causal domain: reference counts, exact admissible sets, tolerant parsing, descriptors."""

from __future__ import annotations

import re

import pytest

from divrl.tasks.hypospace.causal import CausalTask, all_dags


@pytest.mark.parametrize(("nodes", "dags", "observation_sets"), [(3, 25, 61), (4, 543, 847)])
def test_reference_counts_with_unrestricted_edges(nodes: int, dags: int, observation_sets: int) -> None:
    task = CausalTask(nodes=nodes)
    assert len(task.hypothesis_space()) == dags
    assert len(task.instances()) == observation_sets


def test_five_node_dag_count_is_the_known_sequence_value() -> None:
    assert len(all_dags(5, 10)) == 29281  # OEIS A003024


def test_max_edges_restricts_the_space() -> None:
    assert CausalTask(nodes=4, max_edges=6).hypothesis_space() == CausalTask(nodes=4).hypothesis_space()
    assert len(CausalTask(nodes=4, max_edges=1).hypothesis_space()) == 1 + 12
    assert all(key.count("->") <= 2 for key in CausalTask(nodes=4, max_edges=2).hypothesis_space())


def test_admissible_sets_are_exactly_the_consistent_dags() -> None:
    task = CausalTask(nodes=3)
    space = task.hypothesis_space()
    for instance in task.instances():
        consistent = {key for key in space if task.is_consistent(key, instance.observations)}
        assert consistent == set(instance.hypotheses)


def test_observation_sets_partition_the_space_per_perturbed_nodes() -> None:
    task = CausalTask(nodes=4, max_edges=6, observations=[3])
    by_nodes: dict[tuple[str, ...], list[str]] = {}
    for instance in task.instances():
        assert len(instance.observations) == 3 and instance.hypotheses
        nodes = tuple(line[8] for line in instance.observations)
        assert len(set(nodes)) == 3
        by_nodes.setdefault(nodes, []).extend(instance.hypotheses)
    assert len(by_nodes) == 4  # C(4, 3) choices of perturbed nodes
    for hypotheses in by_nodes.values():
        assert sorted(hypotheses) == task.hypothesis_space()


def test_perturbation_semantics_in_one_instance() -> None:
    task = CausalTask(nodes=3, observations=[1])
    instance = next(i for i in task.instances() if i.observations == ("Perturb(A) -> A:0 B:1 C:0",))
    assert {"A->B", "A->B;C->B", "A->B;C->A"} <= set(instance.hypotheses)
    assert "A->B;B->C" not in instance.hypotheses  # C would read 1
    assert "B->A" not in instance.hypotheses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Graph: A->B, B->C", "A->B;B->C"),
        ("Graph: B->C, A->B, A->B", "A->B;B->C"),
        ("Graph: No edges", ""),
        ("graph: none.", ""),
        ("Let me think.\nGraph:  A → B and B => C.", "A->B;B->C"),
        ("```\nGraph: [A->B->C]\n```", "A->B;B->C"),
        ("Graph: {A ⇒ C; B ⟶ C}", "A->C;B->C"),
        ("Graph:\nA->B", "A->B"),
        ("A->B", "A->B"),
        ("graph: a->b; c->a", "A->B;C->A"),
        ("Graph: A->B\nGraph: C->A", "A->B"),
    ],
)
def test_parse_accepts_usual_noise(text: str, expected: str) -> None:
    assert CausalTask(nodes=3).parse(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Graph:\nA->B\nB->C", "A->B;B->C"),  # one edge per line
        ("Graph: A->B,\nB->C", "A->B;B->C"),
        ("Graph: A->B\n->C", "A->B;B->C"),  # a chain going on
        ("Graph: A->B\nand B->C", "A->B;B->C"),
        ("Graph:\n- A->B\n- B->C\nThis fits every observation.", "A->B;B->C"),
        ("Graph: A->B\nAnd this explains every observation.", "A->B"),  # prose after the answer
        ("Graph: A->B\nGraph: C->A", "A->B"),  # a second answer is not a continuation
    ],
)
def test_answer_continues_over_lines(text: str, expected: str) -> None:
    assert CausalTask(nodes=3).parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Graph: A->B,\nmaybe",  # a continuation that cannot be read
        "Graph: A->B\n, which fits",
        "Graph: No edges\nA->B",
        "Graph: A->B" + " " * 5000 + ", B->C",  # longer than the cap: unreadable, not cut to A->B
        "Graph: " + ",\n".join(["A->B"] * 1000),
    ],
)
def test_unreadable_continuations_and_overlong_answers_give_none(text: str) -> None:
    assert CausalTask(nodes=3).parse(text) is None


@pytest.mark.parametrize(
    "arrow", ["\\to", "\\rightarrow", "\\Rightarrow", "\\longrightarrow", "⟹", "⟶", "—>", "- >", "–>", "==>"]
)
def test_latex_and_unicode_arrows(arrow: str) -> None:
    task = CausalTask(nodes=3)
    assert task.parse(f"Graph: A {arrow} B, B {arrow} C") == "A->B;B->C"
    assert task.parse(f"Graph: $A {arrow} B$, \\(B {arrow} C\\)") == "A->B;B->C"


def test_latex_command_must_end_at_the_arrow() -> None:
    assert CausalTask(nodes=3).parse("Graph: A \\toB") is None
    assert CausalTask(nodes=3).parse("Graph: A \\tau B") is None


@pytest.mark.parametrize(
    "text",
    [
        "Graph: A->A",  # self loop
        "Graph: A->B, B->A",  # cycle
        "Graph: A->B->C->A",
        "Graph: A->D",  # unknown node for 3 nodes
        "Graph: A-B",
        "Graph: A",
        "Graph: A->",
        "Graph: ->B",
        "Graph: AB->C",
        "Graph: A->B, maybe",
        "",
        "I do not know.",
    ],
)
def test_parse_rejects_what_is_outside_the_space(text: str) -> None:
    assert CausalTask(nodes=3).parse(text) is None


def test_parse_rejects_too_many_edges() -> None:
    task = CausalTask(nodes=3, max_edges=1)
    assert task.parse("Graph: A->B") == "A->B"
    assert task.parse("Graph: A->B, B->C") is None


def test_render_parse_round_trip_over_the_whole_space() -> None:
    task = CausalTask(nodes=4)
    for key in task.hypothesis_space():
        assert task.parse(task.render_answer(key)) == key
        assert task.parse("Sure, here it is.\n" + task.render_answer(key) + "\nThis fits all observations.") == key


@pytest.mark.parametrize(
    "line",
    [
        "Perturb(Z) -> A:0 B:0 C:0",  # unknown node
        "Perturb(A) -> A:0 B:1",  # a node missing
        "Perturb(A) -> A:0 B:1 C:0 D:0",  # a node too many
        "Perturb(A) -> B:1 A:0 C:0",
        "Perturb(A) -> A:0 B:2 C:0",
        "",
        None,
    ],
)
def test_malformed_observations_are_a_value_error_naming_the_line(line: object) -> None:
    task = CausalTask(nodes=3)
    for hypothesis in ("A->B", "garbage"):
        with pytest.raises(ValueError, match=f"malformed causal observation {re.escape(repr(line))}"):
            task.is_consistent(hypothesis, ["Perturb(B) -> A:0 B:0 C:0", line])


def test_is_consistent_reads_the_observation_semantics() -> None:
    task = CausalTask(nodes=3)
    assert task.is_consistent("A->B", [" Perturb(A) -> A:0 B:1 C:0 ", "Perturb(C) -> A:0 B:0 C:0"])
    assert not task.is_consistent("A->B", ["Perturb(A) -> A:1 B:1 C:0"])  # the perturbed node reads 0
    assert not task.is_consistent("A->B;B->C", ["Perturb(A) -> A:0 B:1 C:0"])
    assert not task.is_consistent("B->A", ["Perturb(A) -> A:0 B:1 C:0"])
    assert not task.is_consistent("garbage", ["Perturb(A) -> A:0 B:1 C:0"])
    with pytest.raises(ValueError, match="list of lines"):
        task.is_consistent("A->B", "Perturb(A) -> A:0 B:1 C:0")


def test_descriptor_edge_fraction_and_direction_balance() -> None:
    task = CausalTask(nodes=3)
    assert task.descriptor("") == (0.0, 0.5)
    assert task.descriptor("A->B;B->C") == (2 / 3, 1.0)
    assert task.descriptor("B->A;C->A;C->B") == (1.0, 0.0)
    for key in task.hypothesis_space():
        assert all(0.0 <= d <= 1.0 for d in task.descriptor(key))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 1}, "nodes"),
        ({"nodes": 6}, "nodes"),
        ({"nodes": 3, "max_edges": 4}, "max_edges"),
        ({"nodes": 3, "observations": [4]}, "observations"),
        ({"nodes": 3, "observations": []}, "observations"),
    ],
)
def test_parameters_out_of_range_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CausalTask(**kwargs)


def test_instances_are_unique_and_ids_stable() -> None:
    task = CausalTask(nodes=3)
    instances = task.instances()
    assert len({i.observations for i in instances}) == len(instances)
    assert [i.id for i in instances] == [i.id for i in CausalTask(nodes=3).instances()]
