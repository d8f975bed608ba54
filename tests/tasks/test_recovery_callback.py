"""Held-out recovery during training: `RecoveryEvalCallback` on tiny local models, and its wiring in divrl.train."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import distinct_chars_reward, lora_config, make_config, snapshot

from divrl.tasks.hypospace import VoxelTask
from divrl.tasks.hypospace.recovery_callback import (
    EVAL_PREFIX,
    RecoveryEvalCallback,
    aggregate_records,
    recovery_points,
)

# Four instances (one occupied cell of a 2x2 grid, height 1 or 2), |H_O| = 2 each; the test split holds two.
TASK = VoxelTask(grid=2, max_height=2, max_blocks=1)
NAMES = [f"{EVAL_PREFIX}recovery@1", f"{EVAL_PREFIX}recovery@2", f"{EVAL_PREFIX}recovery@3",
         f"{EVAL_PREFIX}validity", f"{EVAL_PREFIX}uniqueness", f"{EVAL_PREFIX}vendi_valid", f"{EVAL_PREFIX}runtime"]


def test_recovery_points() -> None:
    assert recovery_points(1) == [1]
    assert recovery_points(2) == [1, 2]
    assert recovery_points(3) == [1, 2, 3]
    assert recovery_points(8) == [1, 2, 4, 8]
    assert recovery_points(9) == [1, 2, 4, 8, 9]


def test_aggregate_records_averages_the_order_free_curve() -> None:
    from divrl.tasks.hypospace.metrics import score_proposals

    records = [score_proposals(["a", "a", None, "b"], frozenset({"a", "b"})),
               score_proposals([None] * 4, frozenset("c"))]
    metrics = aggregate_records(records, 4)
    assert metrics[f"{EVAL_PREFIX}recovery@1"] == pytest.approx((3 / 8 + 0) / 2)
    assert metrics[f"{EVAL_PREFIX}recovery@2"] == pytest.approx((2 / 3 + 0) / 2)
    assert metrics[f"{EVAL_PREFIX}recovery@4"] == pytest.approx(0.5)
    assert metrics[f"{EVAL_PREFIX}validity"] == pytest.approx(3 / 8)
    assert metrics[f"{EVAL_PREFIX}vendi_valid"] == pytest.approx((math.exp(-(2 / 3) * math.log(2 / 3)
                                                                          - (1 / 3) * math.log(1 / 3)) + 0) / 2)
    with pytest.raises(ValueError, match="no evaluation records"):
        aggregate_records([], 4)


def _trainer(model_dir: Path, out: Path, **overrides: Any):
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer

    train = TASK.train_dataset(split="train", style="chat")
    held_out = TASK.train_dataset(split="test", style="chat")
    settings = dict(max_steps=4, logging_steps=1, eval_steps=2, max_completion_length=8, learning_rate=0.05)
    settings.update(overrides)
    return DivRLTrainer(
        str(model_dir), reward_funcs=[distinct_chars_reward], args=make_config(out, **settings), train_dataset=train,
        eval_dataset=held_out, processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=lora_config(),
        task=TASK,
    )


def _answer_generate(tokenizer: Any, answer_for: dict[str, str]):
    """A `generate` that honours num_return_sequences and answers each held-out prompt with its scripted text
    (training prompts get 'x y z'); completions end with EOS."""

    def generate(self: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs: Any):
        repeats = kwargs.get("num_return_sequences") or 1
        rows = []
        for i, row in enumerate(input_ids):
            prompt = tokenizer.decode(row if attention_mask is None else row[attention_mask[i].bool()])
            text = next((a for block, a in answer_for.items() if block in prompt), "x y z")
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            rows += [row.tolist() + ids] * repeats
        width = max(len(r) for r in rows)
        return torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])

    return generate


@pytest.mark.slow
def test_metrics_land_in_trainer_state_at_the_eval_steps(tiny_qwen3: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import GenerationMixin

    trainer = _trainer(tiny_qwen3, tmp_path)
    held_out = [dict(row) for row in trainer.eval_dataset]
    # First held-out instance: always its first hypothesis (RR@n = 1/2, validity 1); second: unreadable text.
    first, second = held_out
    answers = {TASK.observation_block(first["observations"]): TASK.render_answer(first["hypotheses"][0]),
               TASK.observation_block(second["observations"]): "no idea"}
    tokenizer = trainer.processing_class
    monkeypatch.setattr(GenerationMixin, "generate", _answer_generate(tokenizer, answers))
    callback = RecoveryEvalCallback(trainer, instances=0, samples=3, max_new_tokens=64)
    trainer.add_callback(callback)
    trainer.train()
    trainer.save_state()

    history = json.loads((tmp_path / "trainer_state.json").read_text())["log_history"]
    steps = [entry["step"] for entry in history if f"{EVAL_PREFIX}recovery@3" in entry]
    assert steps == [0, 2, 4]  # before training, every eval_steps, and the last step (a multiple here)
    for entry in history:
        if entry["step"] in steps and f"{EVAL_PREFIX}recovery@3" in entry:
            assert set(NAMES) <= set(entry)
            assert entry[f"{EVAL_PREFIX}recovery@1"] == pytest.approx((0.5 + 0) / 2)
            assert entry[f"{EVAL_PREFIX}recovery@3"] == pytest.approx((0.5 + 0) / 2)
            assert entry[f"{EVAL_PREFIX}validity"] == pytest.approx(0.5)
            assert entry[f"{EVAL_PREFIX}uniqueness"] == pytest.approx((1 / 3 + 0) / 2)
            assert entry[f"{EVAL_PREFIX}vendi_valid"] == pytest.approx((1 + 0) / 2)  # one valid answer, nothing
    # Training's own metrics still arrive at every step (the callback must not swallow GRPO's metric buffer).
    assert [entry["step"] for entry in history if "reward" in entry] == [1, 2, 3, 4]
    assert len(callback.history) == 3


@pytest.mark.slow
def test_interval_defaults_to_logging_steps_and_adds_the_last_step(tiny_qwen3: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_qwen3, tmp_path, max_steps=3, eval_steps=None, logging_steps=2)
    callback = RecoveryEvalCallback(trainer, instances=1, samples=2, at_start=False, max_new_tokens=4)
    trainer.add_callback(callback)
    trainer.train()
    assert [step for step, _ in callback.history] == [2, 3]
    steps = [e["step"] for e in trainer.state.log_history if f"{EVAL_PREFIX}recovery@2" in e]
    assert steps == [2, 3]


@pytest.mark.slow
def test_evaluation_leaves_modes_tokenizer_and_random_stream_untouched(tiny_qwen3: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_qwen3, tmp_path)
    callback = RecoveryEvalCallback(trainer, instances=2, samples=2, max_new_tokens=4)
    model = trainer.model
    model.train()
    model.base_model.model.lm_head.eval()  # a mixed state must come back exactly as it was
    modes = {name: module.training for name, module in model.named_modules()}
    trainer.processing_class.padding_side = "right"
    rng = torch.get_rng_state()
    metrics = callback.evaluate()
    assert set(NAMES[:2]) <= set(metrics) and f"{EVAL_PREFIX}recovery@2" in metrics
    assert {name: module.training for name, module in model.named_modules()} == modes
    assert trainer.processing_class.padding_side == "right"
    assert torch.equal(torch.get_rng_state(), rng)
    again = callback.evaluate()  # same seed at every evaluation: same samples from the same policy
    assert {k: v for k, v in again.items() if "runtime" not in k} == {
        k: v for k, v in metrics.items() if "runtime" not in k}


@pytest.mark.slow
def test_training_is_identical_with_and_without_evaluation(tiny_qwen3: Path, tmp_path: Path) -> None:
    """Evaluations sample from their own random stream: the sampled training batches, hence the weights, match."""
    weights = []
    for evaluate in (False, True):
        trainer = _trainer(tiny_qwen3, tmp_path / str(evaluate), max_steps=2, eval_steps=1)
        if evaluate:
            trainer.add_callback(RecoveryEvalCallback(trainer, instances=2, samples=2, max_new_tokens=4))
        trainer.train()
        weights.append(snapshot(trainer.model))
        evals = [e for e in trainer.state.log_history if f"{EVAL_PREFIX}validity" in e]
        assert len(evals) == (3 if evaluate else 0)
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][name], weights[1][name]) for name in weights[0])
    assert any("lora_B" in n and weights[0][n].abs().sum() > 0 for n in weights[0])  # training did move


def test_construction_errors_are_clear(tiny_qwen3: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_qwen3, tmp_path)
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        RecoveryEvalCallback(trainer, samples=0)
    with pytest.raises(ValueError, match="interval must be >= 1"):
        RecoveryEvalCallback(trainer, every=0)
    trainer.eval_dataset = None
    with pytest.raises(ValueError, match="held-out split as its dataset or the trainer's eval_dataset"):
        RecoveryEvalCallback(trainer)
    trainer.eval_dataset = TASK.train_dataset(split="test").remove_columns(["hypotheses"])
    with pytest.raises(ValueError, match=r"columns \['hypotheses'\]"):
        RecoveryEvalCallback(trainer)


@pytest.mark.slow
def test_recipe_with_recovery_eval_logs_it_in_a_dry_run(tmp_path: Path) -> None:
    """divrl.train wires the test split as eval_dataset and the callback; a dry run (tiny model, 1 step) logs it."""
    from divrl.train import main

    recipe = Path(__file__).parents[2] / "recipes" / "embedded-cpu" / "hypospace-boolean" / "grpo.yaml"
    argv = ["--config", str(recipe), "--dry_run", "true", "--output_dir", str(tmp_path), "--recovery_eval", "true",
            "--recovery_eval_instances", "2", "--recovery_eval_samples", "2", "--max_completion_length", "4",
            "--per_device_train_batch_size", "2", "--num_generations", "2", "--save_strategy", "no"]
    assert main(argv) == 0
    history = json.loads((tmp_path / "dry-run" / "trainer_state.json").read_text())["log_history"]
    steps = [e["step"] for e in history if f"{EVAL_PREFIX}recovery@2" in e and f"{EVAL_PREFIX}validity" in e]
    assert steps == [0, 1]


def test_recovery_eval_refuses_tasks_without_admissible_sets(tmp_path: Path) -> None:
    from divrl.train import build_trainer, parse_recipe

    recipe = Path(__file__).parents[2] / "recipes" / "embedded-cpu" / "molecules" / "grpo.yaml"
    script_args, config, model_args = parse_recipe(["--config", str(recipe), "--dry_run", "true", "--output_dir",
                                                    str(tmp_path), "--recovery_eval", "true"])
    with pytest.raises(ValueError, match="needs a task that measures held-out recovery.*task 'molecules' has none"):
        build_trainer(script_args, config, model_args)


def test_recovery_eval_leaves_population_selection_on_training_prompts(tmp_path: Path) -> None:
    """Population-GRPO scores members on a constructor-time eval_dataset: the held-out split must not be it."""
    from divrl.train import build_trainer, parse_recipe

    recipe = Path(__file__).parents[2] / "recipes" / "embedded-cpu" / "hypospace-boolean" / "pop.yaml"
    script_args, config, model_args = parse_recipe(["--config", str(recipe), "--dry_run", "true", "--output_dir",
                                                    str(tmp_path), "--recovery_eval", "true"])
    trainer = build_trainer(script_args, config, model_args)
    held_out = set(trainer.eval_dataset["id"])
    assert held_out and not held_out & set(trainer.train_dataset["id"])
    assert {row["id"] for row in trainer.population.held_rows}.isdisjoint(held_out)
    assert any(isinstance(c, RecoveryEvalCallback) for c in trainer.callback_handler.callbacks)


def test_the_old_import_path_still_works_and_says_where_the_callback_moved() -> None:
    import importlib
    import sys

    sys.modules.pop("divrl.trainers.recovery_callback", None)
    with pytest.warns(DeprecationWarning, match="moved to divrl.tasks.hypospace.recovery_callback"):
        old = importlib.import_module("divrl.trainers.recovery_callback")
    assert old.RecoveryEvalCallback is RecoveryEvalCallback
