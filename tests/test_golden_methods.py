"""The method-registry redesign (issue 30) must leave every method's numbers as they were: each case of
`golden_methods.CASES` trains 2 scripted steps and must give bit-identical rewards after shaping, advantages, loss,
gradient norm, logged metric names and method state to those recorded in tests/golden/methods.json before it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_methods import CASES, GOLDEN, _plain, run_case


@pytest.mark.parametrize("name", CASES)
def test_each_method_reproduces_its_golden_numbers(name: str, tiny_qwen3: Path) -> None:
    recorded = json.loads(GOLDEN.read_text())[name]
    current = json.loads(json.dumps(_plain(run_case(tiny_qwen3, dict(CASES[name])))))
    for key in ("metrics", "loss", "grad_norm", "steps", "method_state"):
        assert current[key] == recorded[key], f"{name}: {key} changed"
