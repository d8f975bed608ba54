"""Experience replay with augmented memory: the memory's ranking, dedup, sampling and state; the LOSS method in
DivRLTrainer on scripted molecules (what it remembers, that replay costs no oracle call, its loss for GRPO and for
REINVENT by hand, its state across a checkpoint); the molecule task's SMILES augmentation."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from divrl.core.replay import ReplayMemory

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
CAFFEINE = "Cn1c(=O)c2c(ncn2C)n(C)c1=O"
PARACETAMOL = "CC(=O)Nc1ccc(O)cc1"


def test_memory_keeps_the_best_distinct_outcomes_in_order() -> None:
    memory = ReplayMemory(capacity=2)
    assert memory.add("a", 1, 0.5) and memory.add("b", 2, 0.9)
    assert not memory.add("a", 3, 0.99)  # a key held keeps its first item and score
    assert not memory.add("c", 4, 0.1)  # below the two best
    assert memory.add("d", 5, 0.7)  # pushes "a" out
    assert [key for key, _, _ in memory.entries] == ["b", "d"]
    assert memory.sample(5, random.Random(0)) and len(memory.sample(1, random.Random(0))) == 1
    restored = ReplayMemory(capacity=2)
    restored.load_state_dict(memory.state_dict())
    assert restored.entries == memory.entries
    with pytest.raises(ValueError, match="replay_memory_size"):
        ReplayMemory(capacity=3).load_state_dict(memory.state_dict())
    with pytest.raises(ValueError, match="positive integer"):
        ReplayMemory(0)


def test_the_molecule_task_augments_a_chemical_lms_smiles_only() -> None:
    from divrl.tasks.molecules import MoleculeTask
    from divrl.tasks.molecules.chem import canonicalize

    task, rng = MoleculeTask(), random.Random(0)
    spellings = {task.augment(ASPIRIN, rng, prompt="") for _ in range(10)}
    assert len(spellings) > 3 and {canonicalize(s) for s in spellings} == {canonicalize(ASPIRIN)}
    assert task.augment(f" {ASPIRIN}\n", rng, prompt="SMILES:") == f" {ASPIRIN}\n"  # few-shot rows as written
    assert task.augment("not a molecule", rng, prompt="") == "not a molecule"


def _train(tiny_qwen3: Path, out: Path, script: list[str], **settings):
    from trainer_helpers import lora_config, make_config
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.tasks.molecules import MoleculeTask, build_dataset
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    task = MoleculeTask(components=["qed"])
    args = make_config(out, max_completion_length=48, replay=True, replay_samples=2, replay_memory_size=2,
                       **settings)
    trainer = DivRLTrainer(str(tiny_qwen3), args=args, train_dataset=build_dataset(8, style="base", n_shots=2),
                           task=task, processing_class=tokenizer, peft_config=lora_config())
    with scripted_generation(tokenizer, lambda prompt, row: script[row % len(script)]):
        trainer.train(resume_from_checkpoint=settings.get("resume_from_checkpoint"))
    return trainer, task


def test_replay_remembers_the_best_and_costs_no_oracle_call(tiny_qwen3: Path, tmp_path: Path) -> None:
    from trainer_helpers import logged

    from divrl.tasks.molecules.rewards import MPO

    script = [f" {ASPIRIN}", f" {CAFFEINE}", f" {PARACETAMOL}", " not a molecule"]
    trainer, task = _train(tiny_qwen3, tmp_path, script, max_steps=2)
    replay = trainer.diversity_state["replay"]
    qed = MPO(["qed"])
    best = sorted(((task.outcome_key(s), qed(s)) for s in (ASPIRIN, CAFFEINE, PARACETAMOL)), key=lambda x: -x[1])[:2]
    assert [(key, score) for key, _, score in replay.memory.entries] == [(k, pytest.approx(v)) for k, v in best]
    assert task.scorer.oracle_calls == 3  # three distinct molecules; the replayed ones were never scored again
    history = trainer.state.log_history
    assert logged(history, "replay/memory_size") == [2.0, 2.0]
    assert all(loss >= 0 for loss in logged(history, "replay/loss"))  # -A log pi with A >= 0 and log pi < 0


def test_replay_loss_matches_hand_computation_for_grpo_and_reinvent(tiny_qwen3: Path, tmp_path: Path) -> None:
    """One micro-batch of 4: the method's term against a plain forward of the replayed rows."""
    from trainer_helpers import completion_logps

    script = [f" {ASPIRIN}", f" {CAFFEINE}", f" {PARACETAMOL}", " not a molecule"]
    for reinvent in (False, True):
        out = tmp_path / f"reinvent-{reinvent}"
        trainer, _ = _train(tiny_qwen3, out, script, max_steps=1, learning_rate=0.0, reinvent=reinvent,
                            reinvent_sigma=2.0)
        replay = trainer.diversity_state["replay"]
        drawn = replay.memory.sample(2, random.Random(f"{trainer.args.seed}-replay-0"))
        batch, scores = replay._batch(drawn, random.Random(0), trainer.processing_class)
        width = batch["completion_mask"].shape[1]
        mask = batch["completion_mask"].float()
        policy = (completion_logps(trainer.model, batch["input_ids"], batch["attention_mask"], width) * mask).sum(1)
        task_scores = torch.tensor([s for s in trainer._logs["rewards"]["molecule_mpo"]][-4:])
        if reinvent:
            with trainer.model.disable_adapter():
                prior = (completion_logps(trainer.model, batch["input_ids"], batch["attention_mask"], width) * mask
                         ).sum(1)
            losses = (prior + 2.0 * scores - policy) ** 2
        else:
            advantages = (scores - task_scores.mean()).clamp(min=0) / (task_scores.std(unbiased=False) + 1e-4)
            losses = -advantages * policy / mask.sum(1)
        (logged_loss,) = [e["replay/loss"] for e in trainer.state.log_history if "replay/loss" in e]
        assert logged_loss == pytest.approx(losses.mean().item(), rel=1e-4, abs=1e-6)


def test_the_memory_resumes_from_a_checkpoint(tiny_qwen3: Path, tmp_path: Path) -> None:
    script = [f" {ASPIRIN}", f" {CAFFEINE}", f" {PARACETAMOL}", " not a molecule"]
    straight, _ = _train(tiny_qwen3, tmp_path / "straight", script, max_steps=2)
    _train(tiny_qwen3, tmp_path / "resumed", script, max_steps=1, save_strategy="steps", save_steps=1)
    resumed, _ = _train(tiny_qwen3, tmp_path / "resumed", script, max_steps=2,
                        resume_from_checkpoint=str(tmp_path / "resumed" / "checkpoint-1"))
    a, b = straight.diversity_state["replay"], resumed.diversity_state["replay"]
    assert a.memory.entries == b.memory.entries and a.draws == b.draws == 2


def test_replay_refuses_flowrl_and_needs_an_outcome_key(tmp_path: Path) -> None:
    from trainer_helpers import make_config

    with pytest.raises(ValueError, match="DivRLConfig.replay cannot be combined with flowrl"):
        make_config(tmp_path, replay=True, flowrl=True)
    with pytest.raises(ValueError, match="replay_samples must be >= 1"):
        make_config(tmp_path, replay=True, replay_samples=0)
