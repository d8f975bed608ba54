"""Voxel domain: reference counts, admissible sets, height limit, tolerant parsing, descriptors."""

from __future__ import annotations

import itertools
import math
import re

import pytest

from divrl.tasks.hypospace.voxel import VoxelTask


def test_reference_counts_grid3_height3_up_to_3_blocks() -> None:
    instances = VoxelTask(grid=3, max_height=3, max_blocks=3).instances()
    assert len(instances) == 129
    assert sum(len(i.hypotheses) for i in instances) == 2619
    for instance in instances:
        assert len(instance.hypotheses) == 3 ** instance.observations[0].count("1")


def test_fixed_block_count() -> None:
    instances = VoxelTask(grid=2, max_height=2, max_blocks=2, fixed=True).instances()
    assert len(instances) == math.comb(4, 2)
    assert all(i.observations[0].count("1") == 2 and len(i.hypotheses) == 4 for i in instances)


def test_admissible_sets_are_exactly_the_consistent_structures() -> None:
    """Brute force over every height map of a 2x2 grid (heights 0..2): consistency <=> membership in H_O."""
    task = VoxelTask(grid=2, max_height=2, max_blocks=4)
    by_view = {i.observations[0]: set(i.hypotheses) for i in task.instances()}
    for heights in itertools.product(range(3), repeat=4):
        if not any(heights):
            continue
        key = task.structure_key({c: h for c, h in enumerate(heights) if h})
        view = "".join("1" if h else "0" for h in heights)
        assert key in by_view[view]
        assert all(task.is_consistent(key, [v]) == (v == view) for v in by_view)
    assert sum(len(h) for h in by_view.values()) == 3**4 - 1


CANONICAL = "Structure:\nLayer 1:\n1 1 0\n0 0 0\n0 0 0\nLayer 2:\n1 0 0\n0 0 0\n0 0 0"


@pytest.mark.parametrize(
    "text",
    [
        CANONICAL,
        CANONICAL.replace("Structure:\n", ""),
        "Here you go:\n```\n" + CANONICAL + "\n```\nThe block at (0,0) is two high.",
        "**Layer 1 (bottom):**\n[1, 1, 0]\n[0, 0, 0]\n[0, 0, 0]\n\n**Layer 2:**\n| 1 | 0 | 0 |\n000\n0 0 0",
        "Layer 1:\n\n110\n000\n000\n\nLayer 2:\n100\n000\n000\nLayer 3:\n0 0 0\n0 0 0\n0 0 0\nEND\nLayer 1:",
        CANONICAL.replace("\n", "\r\n"),
    ],
)
def test_parse_accepts_usual_noise(text: str) -> None:
    assert VoxelTask().parse(text) == "110000000/100000000"


@pytest.mark.parametrize(
    "text",
    [
        "Layer 1: [1,1,0],[0,0,0],[0,0,0]\nLayer 2: [1,0,0],[0,0,0],[0,0,0]",  # all rows of a layer on one line
        "Layer 1: [[1, 1, 0], [0, 0, 0], [0, 0, 0]]\nLayer 2: [[1, 0, 0], [0, 0, 0], [0, 0, 0]]",
        "Layer 1: 1 1 0; 0 0 0; 0 0 0\nLayer 2: 1 0 0; 0 0 0; 0 0 0",
        "Layer 1: 110000000\nLayer 2:\n100000000",
        "Layer 1: 1 1 0\n0 0 0\n0 0 0\nLayer 2 (top): 1 0 0\n0 0 0 0 0 0",  # rows split any way
        # Prose that begins with "Layer 1" before the real answer is skipped.
        "Layer 1 is the bottom layer, so the tall column shows in both.\nStructure:\n" + CANONICAL,
        "Layer 1 (the ground) holds two blocks.\nLayer 1: [1,1,0],[0,0,0],[0,0,0]\nLayer 2: [1,0,0],[0,0,0],[0,0,0]",
    ],
)
def test_parse_reads_rows_on_one_line_and_skips_prose(text: str) -> None:
    assert VoxelTask().parse(text) == "110000000/100000000"


@pytest.mark.parametrize(
    "text",
    [
        "Layer 1: [1,0,0],[0,0,0]",  # a row missing
        "Layer 1: [1,0,0],[0,0,0],[0,0,0],[0,0,0]",  # a row too many
        "Layer 1: 1 0 0 0\n0 0 0 0 0",  # rows of the wrong width
        "Layer 1 is the bottom layer.",  # prose and no answer
        # Longer than the cap: unreadable, not cut to its first layer.
        "Layer 1:\n1 0 0\n0 0 0\n0 0 0\nLayer 2:\n" + "|" * 4000 + "1 0 0\n0 0 0\n0 0 0",
        "Layer 1:\n1 0 0\n0 0 0\n0 0 0\nLayer 2:\n1 0 0\nI am not sure\n0 0 0",
    ],
)
def test_parse_rejects_broken_layers(text: str) -> None:
    assert VoxelTask().parse(text) is None


def test_blank_lines_do_not_count_toward_the_cap() -> None:
    text = "Layer 1:\n1 0 0\n0 0 0\n0 0 0\n" + " \n" * 5000 + "Layer 2:\n1 0 0\n0 0 0\n0 0 0"
    assert VoxelTask().parse(text) == "100000000/100000000"


@pytest.mark.parametrize("line", ["10000000", "1000000000", "100 000 000", "2000000000", "", None])
def test_malformed_observations_are_a_value_error_naming_the_line(line: object) -> None:
    task = VoxelTask()
    for hypothesis in ("100000000", "garbage"):
        with pytest.raises(ValueError, match=f"malformed voxel observation {re.escape(repr(line))}"):
            task.is_consistent(hypothesis, ["100000000", line])


@pytest.mark.parametrize(
    "text",
    [
        "Layer 1:\n1 0 0\n0 0 0\n0 0 0\nLayer 2:\n0 1 0\n0 0 0\n0 0 0",  # floating block
        "Layer 1:\n1 0 0\n0 0 0",  # missing row
        "Layer 1:\n1 0 0 0\n0 0 0\n0 0 0",  # row too long
        "Layer 1:\n1 2 0\n0 0 0\n0 0 0",
        "Layer 2:\n1 0 0\n0 0 0\n0 0 0",  # does not start at layer 1
        "Layer 1:\n1 0 0\n0 0 0\n0 0 0\nLayer 3:\n1 0 0\n0 0 0\n0 0 0",  # skips a layer
        "Layer 1:\n0 0 0\n0 0 0\n0 0 0",  # empty structure
        "Structure: a tower",
        "",
    ],
)
def test_parse_rejects_what_is_outside_the_space(text: str) -> None:
    assert VoxelTask().parse(text) is None


def test_height_limit_is_enforced_unlike_the_reference() -> None:
    tower = "\n".join(f"Layer {k}:\n1 0 0\n0 0 0\n0 0 0" for k in range(1, 5))
    assert VoxelTask(max_height=3).parse(tower) is None
    assert VoxelTask(max_height=4).parse(tower) == "/".join(["100000000"] * 4)


def test_trailing_empty_layers_are_dropped() -> None:
    text = "Layer 1:\n1 0 0\n0 0 0\n0 0 0\nLayer 2:\n0 0 0\n0 0 0\n0 0 0"
    assert VoxelTask().parse(text) == "100000000"


def test_render_parse_round_trip_over_all_hypotheses() -> None:
    task = VoxelTask()
    for instance in task.instances():
        for key in instance.hypotheses:
            assert task.parse(task.render_answer(key)) == key
            assert task.is_consistent(key, instance.observations)


def test_descriptor_mean_height_and_spread() -> None:
    task = VoxelTask()
    assert task.descriptor("110000000") == (0.0, 0.0)
    assert task.descriptor("110000000/100000000/100000000") == (0.5, 1.0)
    assert task.descriptor("110000000/110000000/110000000") == (1.0, 0.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"grid": 0}, "grid"),
        ({"max_height": 9}, "max_height"),
        ({"grid": 2, "max_blocks": 5}, "max_blocks"),
        ({"grid": 5, "max_height": 6, "max_blocks": 10}, "admissible structures"),
    ],
)
def test_parameters_out_of_range_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VoxelTask(**kwargs)
