"""pass@k of "valid and reward > tau" in `evaluate_molecules`, per prompt with the unbiased estimator."""

from __future__ import annotations

import pytest
from test_molecules_evaluate import COMPLETIONS, ScriptedSampler

from divrl.tasks.molecules.evaluate import evaluate_molecules


def test_pass_at_k_per_prompt_above_each_threshold() -> None:
    # Prompt 1 gets aspirin (MPO > 0.8), caffeine (0.75 < MPO < 0.8), an invalid SMILES; prompt 2 gets prose and
    # aspirin again. k runs to the fewest samples of a prompt (2).
    sampler = ScriptedSampler([COMPLETIONS[0::2], COMPLETIONS[1::2]])
    metrics = evaluate_molecules(sampler, 5, prompts=2, reference=[], taus=(0.75, 0.8), ob_n=2)
    # tau 0.75: 2 of 3 and 1 of 2 pass -> pass@1 = (2/3 + 1/2) / 2, pass@2 = 1 for both prompts.
    # tau 0.8: 1 of 3 and 1 of 2 -> pass@1 = (1/3 + 1/2) / 2, pass@2 = (1 - C(2,2)/C(3,2) + 1) / 2 = 5/6.
    assert metrics["pass_at_k"]["0.75"] == pytest.approx([7 / 12, 1.0])
    assert metrics["pass_at_k"]["0.8"] == pytest.approx([5 / 12, 5 / 6])


def test_pass_at_1_is_the_mean_per_prompt_success_rate() -> None:
    def all_aspirin(prompts: list, n: int) -> list[list[str]]:
        return [[COMPLETIONS[0]] * n for _ in prompts]

    metrics = evaluate_molecules(all_aspirin, 8, prompts=4, reference=[], taus=(0.8, 0.99))
    assert metrics["pass_at_k"] == {"0.8": [1.0, 1.0], "0.99": [0.0, 0.0]}
