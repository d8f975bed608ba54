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
