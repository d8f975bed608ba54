"""REINVENT's augmented-likelihood objective: the pure function against hand-computed values (REINVENT 4's
`dap_strategy`, reinvent/runmodes/RL/reward.py: loss = (prior_lls + sigma * scores - agent_lls)^2, then the batch
mean), and the OBJECTIVE stage in DivRLTrainer on scripted completions, alone and composed with IPS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import logged, lora_config, make_config, prompt_dataset, text_of

from divrl.core.reinvent import augmented_likelihood_loss, augmented_likelihood_residual


def test_residual_and_loss_match_hand_computed_values() -> None:
    agent = torch.tensor([-10.0, -20.0], requires_grad=True)
    prior, scores = torch.tensor([-12.0, -15.0]), torch.tensor([0.5, 0.0])
    # residual = prior + sigma S - agent = [-12 + 1 + 10, -15 + 0 + 20] = [-1, 5]; loss = (1 + 25) / 2 = 13
    assert augmented_likelihood_residual(agent, prior, scores, 2.0).tolist() == [-1.0, 5.0]
    loss = augmented_likelihood_loss(agent, prior, scores, 2.0)
    assert loss.item() == 13.0
    loss.backward()
    assert agent.grad.tolist() == [1.0, -5.0]  # d mean(r^2) / d agent = -r (B = 2): the agent moves toward the target


def test_bad_arguments_name_the_problem() -> None:
    with pytest.raises(ValueError, match="equal shape"):
        augmented_likelihood_residual(torch.zeros(2), torch.zeros(3), torch.zeros(2))
    with pytest.raises(ValueError, match="sigma must be > 0"):
        augmented_likelihood_residual(torch.zeros(2), torch.zeros(2), torch.zeros(2), 0.0)


REWARDS = {"ab": 1.0, "b": 0.0, "abc d": 3.0, "xyz": 2.0, "aa": 0.5, "hello": 4.0, "q": 0.0, "zz top": 1.0}


def table_reward(completions: list, **_: Any) -> list[float]:
    return [REWARDS[text_of(c)] for c in completions]


@pytest.mark.parametrize("ips", [False, True])
def test_first_step_loss_is_sigma_squared_times_the_mean_squared_score(ips: bool, tiny_qwen3: Path,
                                                                        tmp_path: Path) -> None:
    """At the first step the LoRA policy IS the prior (B = 0), so each residual is sigma S exactly. With IPS, S is
    the score divided by its molecule's count in the group: rows 0 and 1 repeat "ab" (count 2)."""
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    completions = ["ab", "ab", "abc d", "xyz", "aa", "hello", "q", "zz top"]  # two groups of 4
    counts = [2, 2, 1, 1, 1, 1, 1, 1]
    scores = [REWARDS[c] / (n if ips else 1) for c, n in zip(completions, counts, strict=True)]
    sigma = 2.0
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    # two micro-batches of 4 (one group each) make the step's 8 rows
    args = make_config(tmp_path, max_steps=1, gradient_accumulation_steps=2, learning_rate=0.0, reinvent=True,
                       reinvent_sigma=sigma, ips=ips, ips_outcome_key="text")
    trainer = DivRLTrainer(str(tiny_qwen3), table_reward, args=args, train_dataset=prompt_dataset(),
                           processing_class=tokenizer, peft_config=lora_config())
    with scripted_generation(tokenizer, lambda prompt, row: completions[row]):
        trainer.train()
    history = trainer.state.log_history
    expected = sigma**2 * sum(s * s for s in scores) / len(scores)
    assert logged(history, "reinvent/loss") == pytest.approx([expected], rel=1e-5)
    assert logged(history, "reinvent/score") == pytest.approx([sum(scores) / len(scores)], rel=1e-6)
    assert logged(history, "reinvent/residual") == pytest.approx([sigma * sum(scores) / len(scores)], rel=1e-5)


def test_reinvent_trains_toward_high_scores_and_refuses_flowrl(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.testing import scripted_generation

    with pytest.raises(ValueError, match="DivRLConfig.reinvent cannot be combined with flowrl"):
        make_config(tmp_path, reinvent=True, flowrl=True)
    with pytest.raises(ValueError, match="reinvent_sigma must be > 0"):
        make_config(tmp_path, reinvent=True, reinvent_sigma=-1.0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    args = make_config(tmp_path, max_steps=3, learning_rate=0.05, reinvent=True, reinvent_sigma=2.0)
    assert isinstance(args, DivRLConfig)
    trainer = DivRLTrainer(str(tiny_qwen3), table_reward, args=args, train_dataset=prompt_dataset(),
                           processing_class=tokenizer, peft_config=lora_config())
    completions = list(REWARDS)
    with scripted_generation(tokenizer, lambda prompt, row: completions[row]):
        trainer.train()
    losses = logged(trainer.state.log_history, "reinvent/loss")
    assert len(losses) == 3 and losses[-1] < losses[0]  # the same completions each step: the regression closes in
