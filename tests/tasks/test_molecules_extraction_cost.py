"""SMILES extraction cost: linear in the text (counted in regex work, not timed), once per completion per step."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from divrl.tasks.molecules import DiversityFilter, MoleculeTask, chem

PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"


class _CountingPattern:
    """A compiled pattern that adds the length of every match it returns (or string it rewrites) to a counter."""

    def __init__(self, pattern: re.Pattern[str], counter: list[int]) -> None:
        self._pattern, self._counter = pattern, counter

    def _count(self, match: re.Match[str] | None) -> re.Match[str] | None:
        if match is not None:
            self._counter[0] += match.end() - match.start()
        return match

    def search(self, *args: Any) -> re.Match[str] | None:
        return self._count(self._pattern.search(*args))

    def match(self, *args: Any) -> re.Match[str] | None:
        return self._count(self._pattern.match(*args))

    def fullmatch(self, *args: Any) -> re.Match[str] | None:
        return self._count(self._pattern.fullmatch(*args))

    def finditer(self, *args: Any) -> Iterator[re.Match[str]]:
        for match in self._pattern.finditer(*args):
            yield self._count(match)

    def findall(self, string: str, *args: Any) -> list[Any]:
        self._counter[0] += len(string)
        return self._pattern.findall(string, *args)

    def sub(self, repl: Any, string: str, *args: Any) -> str:
        self._counter[0] += len(string)
        return self._pattern.sub(repl, string, *args)


def _regex_work(text: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Characters matched by every regular expression of the extraction module while extracting `text`."""
    counter = [0]
    with monkeypatch.context() as patch:
        for name, value in vars(chem).items():
            if isinstance(value, re.Pattern):
                patch.setattr(chem, name, _CountingPattern(value, counter))
        chem.extract_smiles(text + " ")  # a text not seen before: no memoised answer
    return counter[0]


@pytest.mark.parametrize("unit", ["SMILES:", "SMILES: ", "**SMILES:**", "smiles string = "])
def test_repeated_labels_cost_linear_work(unit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each label's token used to be read to the end of the run: quadratic (7.7 s for 20k characters)."""
    small = _regex_work(unit * (8_000 // len(unit)), monkeypatch)
    large = _regex_work(unit * (16_000 // len(unit)), monkeypatch)
    assert large / small < 2.5  # quadratic work would give ~4
    assert large < 200 * 16_000


def test_huge_label_runs_complete_and_read_a_later_answer() -> None:
    assert chem.extract_smiles("SMILES:" * (200_000 // 7)) is None
    assert chem.extract_smiles("SMILES:" * 3 + PARACETAMOL) == chem.canonicalize(PARACETAMOL)
    long_token = "SMILES:" + "C" * (chem.MAX_SMILES_CHARS + 20)
    assert chem.extract_smiles(long_token) is None  # over-long labelled tokens are still refused


def test_each_completion_is_extracted_once_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reward, diversity filter, IPS outcome key and QD behaviour of one group share one extraction each."""
    calls: list[str] = []
    original = chem._extract_text
    monkeypatch.setattr(chem, "_extract_text", lambda text, *a: calls.append(text) or original(text, *a))
    chem.clear_extraction_cache()
    task = MoleculeTask(diversity_filter=DiversityFilter(bucket_size=2, min_score=0.0))
    (reward,) = task.reward_funcs()
    group = [f" {PARACETAMOL}\n", " c1ccccc1CCO\n", " no molecule\n", f" {PARACETAMOL}\n"] * 2
    reward(prompts=["p"] * len(group), completions=group)
    for completion in group:
        task.outcome_key(completion)
        task.behavior(completion)
    assert sorted(calls) == sorted(set(group))
