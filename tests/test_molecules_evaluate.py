"""`evaluate_molecules` with patched generation: known completions give known metrics and files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from divrl.tasks.molecules.evaluate import evaluate_molecules
from divrl.tasks.molecules.rewards import MPO
from rdkit import Chem

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
CAFFEINE = "Cn1c(=O)c2c(ncn2C)n(C)c1=O"
COMPLETIONS = [
    f" {ASPIRIN}\nSMILES: CCO",
    "I am not sure.",
    f"```\n{CAFFEINE}\n```",
    " OC(=O)c1ccccc1OC(C)=O",  # aspirin again, another spelling: a cache hit, no oracle call
    "C1CC",
]


class ScriptedSampler:
    """Returns COMPLETIONS in order and records the prompt batches it was given."""

    def __init__(self) -> None:
        self.batches: list[list] = []

    def __call__(self, prompts: list) -> list[str]:
        start = sum(len(b) for b in self.batches)
        self.batches.append(list(prompts))
        return COMPLETIONS[start : start + len(prompts)]


def test_known_completions_give_known_metrics(tmp_path: Path) -> None:
    aspirin, caffeine = MPO()(ASPIRIN), MPO()(CAFFEINE)
    assert 0.75 < caffeine < 0.8 < aspirin  # the thresholds below separate the two molecules
    sampler = ScriptedSampler()
    metrics = evaluate_molecules(
        sampler, 5, prompts=2, batch_size=2, reference=[ASPIRIN], taus=(0.75, 0.8), ob_n=2, out_dir=tmp_path
    )
    assert [len(b) for b in sampler.batches] == [2, 2, 1]
    prompts = [p for b in sampler.batches for p in b]
    assert prompts[0] == prompts[2] == prompts[4] != prompts[1] == prompts[3]  # round-robin over 2 prompts
    assert prompts[0].endswith("SMILES:")
    assert metrics["samples"] == 5 and metrics["validity"] == pytest.approx(3 / 5)
    assert metrics["uniqueness"] == pytest.approx(2 / 3) and metrics["novelty"] == pytest.approx(1 / 2)
    assert metrics["oracle_calls"] == 2
    assert metrics["yield"] == {"0.75": 2, "0.8": 1}
    assert metrics["oracle_burden_2"] == {"0.75": 2, "0.8": None}
    assert metrics["reward"]["mean"] == pytest.approx((2 * aspirin + caffeine) / 5)
    assert metrics["few_shot_copy_fraction"] == 0.0
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [line["smiles"] for line in lines] == [Chem.CanonSmiles(ASPIRIN), None, Chem.CanonSmiles(CAFFEINE)] + [
        Chem.CanonSmiles(ASPIRIN),
        None,
    ]
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_copying_few_shot_examples_is_detected_and_not_novel() -> None:
    def copy_first_example(prompts: list) -> list[str]:
        return [p[1]["content"].splitlines()[1].removeprefix("- ") for p in prompts]

    metrics = evaluate_molecules(copy_first_example, 4, style="instruct", prompts=4)
    assert metrics["validity"] == 1.0 and metrics["few_shot_copy_fraction"] == 1.0
    assert metrics["novelty"] == 0.0  # the default reference holds the few-shot pool


def test_bad_sampler_or_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="returned 0 completions for 2 prompts"):
        evaluate_molecules(lambda prompts: [], 2)
    with pytest.raises(ValueError, match="samples"):
        evaluate_molecules(ScriptedSampler(), 0)
