"""SGRPO's leave-one-out set diversity: the pure functions against hand-computed values, and the REWARD method on the
molecule task's Morgan fingerprints."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from divrl.core.set_diversity import leave_one_out_diversity, set_diversity

# Two identical fingerprints, one disjoint from them, one half-way: pairwise Tanimoto (0,1) = 1, (0,2) = (1,2) = 0,
# (0,3) = (1,3) = (2,3) = 1/3, so D = 1 - 2/6 = 2/3.
BITS = torch.tensor([[1.0, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0]])


def test_set_diversity_and_credits_match_hand_computed_values() -> None:
    assert set_diversity(BITS) == pytest.approx(2 / 3)
    assert set_diversity(BITS[:1]) == 0.0
    # without 0: pairs (1,2) 0, (1,3) 1/3, (2,3) 1/3 -> D 7/9, credit 2/3 - 7/9 = -1/9; without 2: D 4/9, credit 2/9;
    # without 3: pairs (0,1) 1, (0,2) 0, (1,2) 0 -> D 2/3, credit 0
    credits = leave_one_out_diversity(BITS, torch.ones(4, dtype=torch.bool))
    assert credits.tolist() == pytest.approx([-1 / 9, -1 / 9, 2 / 9, 0.0])
    # an invalid row is left out of D and credited 0: the valid rows 0, 2, 3 alone
    partial = leave_one_out_diversity(BITS, torch.tensor([True, False, True, True]))
    brute = [set_diversity(BITS[[0, 2, 3]]) - set_diversity(BITS[rows]) for rows in ([2, 3], [0, 3], [0, 2])]
    assert partial.tolist() == pytest.approx([brute[0], 0.0, brute[1], brute[2]])
    assert leave_one_out_diversity(BITS, torch.tensor([True, False, False, False])).tolist() == [0.0] * 4
    cosine = leave_one_out_diversity(BITS, torch.ones(4, dtype=torch.bool), "cosine")
    assert cosine[2] > 0 > cosine[0]


def test_bad_arguments_name_the_problem() -> None:
    with pytest.raises(ValueError, match="similarity must be one of"):
        set_diversity(BITS, "jaccard")
    with pytest.raises(ValueError, match="valid must be a bool tensor"):
        leave_one_out_diversity(BITS, torch.ones(4))


def test_set_diversity_pays_molecules_that_widen_their_group(tiny_qwen3: Path, tmp_path: Path) -> None:
    """Scripted molecules in one group of 4: two copies of aspirin, caffeine, and no molecule. The copies lower the
    group's diversity (negative credit), caffeine raises it, the non-molecule gets 0; the bonus is 0.9 x credit."""
    from trainer_helpers import make_config
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.methods import presets_of
    from divrl.tasks.molecules import MoleculeTask, build_dataset
    from divrl.testing import scripted_generation

    script = [" CC(=O)Oc1ccccc1C(=O)O", " CC(=O)Oc1ccccc1C(=O)O", " Cn1c(=O)c2c(ncn2C)n(C)c1=O", " nothing"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    task = MoleculeTask(components=["validity"])  # every valid molecule scores 1: only the bonus differs
    args = make_config(tmp_path, max_steps=1, max_completion_length=48, **presets_of("set_diversity"))
    trainer = DivRLTrainer(str(tiny_qwen3), args=args, train_dataset=build_dataset(4, style="base", n_shots=2),
                           task=task, processing_class=tokenizer)
    captured = {}
    original = trainer._shape_rewards

    def capture(*a, **k):
        captured["rewards"] = original(*a, **k)
        return captured["rewards"]

    trainer._shape_rewards = capture
    with scripted_generation(tokenizer, lambda prompt, row: script[row % 4]):
        trainer.train()
    bonus = captured["rewards"][:, -1]
    fingerprints = torch.tensor([task.embed(s.strip()) for s in script[:3]])
    expected = 0.9 * leave_one_out_diversity(fingerprints, torch.ones(3, dtype=torch.bool))
    assert bonus[:3].tolist() == pytest.approx(expected.tolist(), abs=1e-6)
    assert bonus[3].item() == 0.0 and bonus[0] < 0 < bonus[2]
