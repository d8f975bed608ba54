"""The molecule task drives a divrl trainer: IPS on canonical SMILES, QD on (MolWt, logP), cached rewards."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_helpers import lora_config, make_config

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"
CAFFEINE = "Cn1c(=O)c2c(ncn2C)n(C)c1=O"
# Per global row of every step's batch of 4: two spellings of aspirin, caffeine, and no molecule.
SCRIPT = [f" {ASPIRIN}", " OC(=O)c1ccccc1OC(C)=O", f" {CAFFEINE}", " not a molecule"]


@pytest.mark.slow
def test_ips_qd_training_with_the_molecule_task(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.tasks.molecules import DiversityFilter, MoleculeTask, build_dataset
    from divrl.testing import scripted_generation

    task = MoleculeTask(diversity_filter=DiversityFilter(bucket_size=10, min_score=0.5))
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    args = make_config(tmp_path, ips=True, ips_outcome_key="task", qd=True, max_completion_length=48)
    trainer = DivRLTrainer(
        str(tiny_qwen3),
        args=args,
        train_dataset=build_dataset(4, style="base", n_shots=2),
        task=task,
        processing_class=tokenizer,
        peft_config=lora_config(),
    )
    with scripted_generation(tokenizer, lambda prompt, row: SCRIPT[row % 4]):
        trainer.train()
    logs = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert trainer.state.global_step == 2
    assert [call.smiles for call in task.scorer.history] == [task.outcome_key(ASPIRIN), task.outcome_key(CAFFEINE)]
    assert task.scorer.hits == 4  # 6 valid samples over 2 steps, 2 oracle calls
    assert logs["molecules/validity"] == pytest.approx(0.75)
    assert logs["ips/distinct_outcomes"] > 0 and "qd/coverage" in logs
    assert task.diversity_filter.memory == {task.outcome_key(ASPIRIN), task.outcome_key(CAFFEINE)}


@pytest.mark.slow
def test_an_oracle_budget_ends_training_with_a_checkpoint_and_counts_an_earlier_history(
        tiny_qwen3: Path, tmp_path: Path) -> None:
    """PMO's fixed budget: the run stops after the step whose calls reach `oracle_budget` and saves its state; calls
    loaded from `oracle_history` (an earlier stage, e.g. a rehearsal set's sampling) count and are not paid again."""
    import json

    import torch
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.tasks.molecules import MoleculeTask, build_dataset
    from divrl.tasks.molecules.scoring import write_history
    from divrl.testing import scripted_generation

    earlier = tmp_path / "earlier.jsonl"
    write_history(earlier, [(MoleculeTask().outcome_key(ASPIRIN), 0.5)])
    task = MoleculeTask(oracle_budget=2, oracle_history=str(earlier))
    assert task.scorer.oracle_calls == 1 and task.stop_reason() is None
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    args = make_config(tmp_path / "run", max_steps=5, max_completion_length=48, save_strategy="steps", save_steps=100)
    trainer = DivRLTrainer(str(tiny_qwen3), args=args, train_dataset=build_dataset(4, style="base", n_shots=2),
                           task=task, processing_class=tokenizer, peft_config=lora_config())
    with scripted_generation(tokenizer, lambda prompt, row: SCRIPT[row % 4]):
        trainer.train()
    assert trainer.state.global_step == 1  # step 1 scored caffeine (aspirin was cached): 2 calls, the budget
    assert [call.smiles for call in task.scorer.history] == [task.outcome_key(ASPIRIN), task.outcome_key(CAFFEINE)]
    assert task.stop_reason() == "oracle budget spent: 2 calls of 2"
    saved = torch.load(tmp_path / "run" / "checkpoint-1" / "divrl_state.pt", weights_only=True)
    assert json.dumps(saved).count(task.outcome_key(CAFFEINE)) >= 1  # the history travels with the checkpoint


def test_bad_oracle_budget_and_history_name_the_problem(tmp_path: Path) -> None:
    from divrl.tasks.molecules import MoleculeTask

    with pytest.raises(ValueError, match="budget"):
        MoleculeTask(oracle_budget=0)
    bad = tmp_path / "calls.jsonl"
    bad.write_text('{"smiles": "CCO", "score": 0.1}\n{"smiles": "CCN"}\n')
    with pytest.raises(ValueError, match=r"calls\.jsonl:2: not an oracle call"):
        MoleculeTask(oracle_history=str(bad))
