"""The embedded real LLM (Gemma-3-270M from the package registry) through a real divrl training step.

Real weights, real tokenizer, real generation: no mocks. Prepared once into the cache (reused across runs).
Deselect locally with `-m "not real_model"`; CI runs it.
"""

import math

import pytest
import torch

from divrl.task import build_task


@pytest.mark.real_model
@pytest.mark.slow
def test_one_ips_step_of_the_embedded_model_on_a_hypospace_prompt(tmp_path) -> None:
    from divrl import DivRLConfig, DivRLTrainer
    from divrl.models import default_lora_config, load_model_and_tokenizer

    task = build_task("hypospace-voxel", grid=3, max_height=3, max_blocks=3, format_reward=0.5)
    model, tokenizer = load_model_and_tokenizer("embedded:gemma-3-270m", quantize="none")
    dataset = task.train_dataset(split="train", style="base", limit=8, n_exemplars=1).select(range(1))
    config = DivRLConfig(output_dir=str(tmp_path), ips=True, num_generations=4, per_device_train_batch_size=4,
                         max_completion_length=24, max_steps=1, learning_rate=1e-4, use_cpu=True, bf16=False,
                         logging_steps=1, report_to="none", save_strategy="no")
    trainer = DivRLTrainer(model=model, reward_funcs=task.reward_funcs(), args=config, train_dataset=dataset,
                           processing_class=tokenizer, peft_config=default_lora_config(), task=task)
    base_before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" not in n}
    trainer.train()
    log = next(entry for entry in trainer.state.log_history if "ips/distinct_outcomes" in entry)
    assert 0 <= log["ips/distinct_outcomes"] <= 4
    assert math.isfinite(log["entropy"]) and log["entropy"] > 0
    assert math.isfinite(log["diversity/pairwise"])
    after = dict(trainer.model.named_parameters())
    assert base_before and all(torch.equal(p, after[n]) for n, p in base_before.items())
    assert any("lora_A" in n for n in after) and any("lora_B" in n for n in after)


@pytest.mark.real_model
@pytest.mark.parametrize("task_name", ["hypospace-voxel", "hypospace-causal", "hypospace-boolean"])
def test_cpu_recipes_and_the_evidence_benchmark_leave_room_for_the_longest_answer(task_name: str) -> None:
    # A cap below an answer's length cuts it before its END line: such answers can never be valid (voxel's
    # 3-layer structures are 71 tokens; the caps were once 60 for training and 40 for evaluation).
    import sys
    from pathlib import Path

    import yaml
    from transformers import AutoTokenizer

    from divrl.models import resolve_model_name

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    import hypospace_recovery

    recipe = yaml.safe_load((root / "recipes" / "embedded-cpu" / task_name / "grpo.yaml").read_text())
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name("embedded:gemma-3-270m"))
    evidence_caps = [s.max_new_tokens for s in hypospace_recovery.TASKS.values() if s.task == task_name]
    task = build_task(task_name, **{k: v for k, v in recipe["task_args"].items() if k != "format_reward"})
    answers = task.sft_dataset(split="all", limit=recipe.get("instance_limit"), per_instance=10**6)["completion"]
    longest = max(len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers)
    assert longest <= recipe["max_completion_length"] and all(longest <= cap for cap in evidence_caps)
