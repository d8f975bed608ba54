"""TRL conventions hold when GRPOTrainer is swapped for DivRLTrainer: a GRPOConfig is accepted, a GRPOTrainer
checkpoint resumes when no enabled method has state to restore, model cards name the method that ran."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from trainer_helpers import ToyTask, base_settings, lora_config, make_config, prompt_dataset

COMPLETIONS = ["abc e", "bcd", "xyz", "aeiou"]


def _train(trainer_cls, model: Path, args, resume: str | None = None, **kwargs):
    from transformers import AutoTokenizer

    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(model)
    trainer = trainer_cls(str(model), args=args, train_dataset=prompt_dataset(), processing_class=tokenizer,
                          peft_config=lora_config(), **kwargs)
    with scripted_generation(tokenizer, lambda prompt, row: COMPLETIONS[row % 4]):
        trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.fixture(scope="module")
def grpo_checkpoint(tiny_qwen3: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """checkpoint-2 of a plain TRL GRPOTrainer run (no divrl_state.pt)."""
    from trl import GRPOConfig, GRPOTrainer

    out = tmp_path_factory.mktemp("grpo")
    args = GRPOConfig(**base_settings(out, save_strategy="steps", save_steps=2))
    _train(GRPOTrainer, tiny_qwen3, args, reward_funcs=ToyTask().reward_funcs())
    checkpoint = out / "checkpoint-2"
    assert not (checkpoint / "divrl_state.pt").exists()
    return checkpoint


def test_resume_from_a_grpo_trainer_checkpoint_without_method_state(
        tiny_qwen3: Path, tmp_path: Path, grpo_checkpoint: Path, caplog: pytest.LogCaptureFixture) -> None:
    from divrl import DivRLTrainer

    args = make_config(tmp_path / "ips", max_steps=3, ips=True, length_bins=2, divergence="forward_kl")
    with caplog.at_level(logging.WARNING, logger="divrl.trainers.checkpoint"):
        trainer = _train(DivRLTrainer, tiny_qwen3, args, resume=str(grpo_checkpoint), task=ToyTask())
    assert trainer.state.global_step == 3
    notes = [r.getMessage() for r in caplog.records if "divrl_state.pt" in r.getMessage()]
    assert len(notes) == 1 and str(grpo_checkpoint) in notes[0] and "\n" not in notes[0]


def test_resume_from_a_grpo_trainer_checkpoint_refused_when_a_method_has_state(
        tiny_qwen3: Path, tmp_path: Path, grpo_checkpoint: Path) -> None:
    from divrl import DivRLTrainer

    args = make_config(tmp_path / "qd", max_steps=3, qd=True)
    with pytest.raises(ValueError, match="has no divrl_state.pt"):
        _train(DivRLTrainer, tiny_qwen3, args, resume=str(grpo_checkpoint), task=ToyTask())


def test_a_grpo_config_is_accepted_with_every_method_off(tiny_qwen3: Path, tmp_path: Path) -> None:
    from trl import GRPOConfig

    from divrl import DivRLConfig, DivRLTrainer, IPSGRPOTrainer

    grpo_args = GRPOConfig(**base_settings(tmp_path, max_steps=1, gradient_accumulation_steps=2, beta=0.1))
    trainer = _train(DivRLTrainer, tiny_qwen3, grpo_args, task=ToyTask())
    assert trainer.state.global_step == 1
    assert isinstance(trainer.args, DivRLConfig) and type(grpo_args) is GRPOConfig  # the caller's object is kept
    defaults = DivRLConfig(**base_settings(tmp_path / "defaults"))
    divrl_only = {f for f in DivRLConfig.__dataclass_fields__} - set(GRPOConfig.__dataclass_fields__)
    assert divrl_only and all(getattr(trainer.args, f) == getattr(defaults, f) for f in divrl_only)
    for name in GRPOConfig.__dataclass_fields__:  # TRL's derived values are kept, not recomputed
        assert getattr(trainer.args, name) == getattr(grpo_args, name), name
    assert not (trainer.args.ips or trainer.args.qd or trainer.args.population or trainer.args.flowrl)

    preset = IPSGRPOTrainer(str(tiny_qwen3), args=grpo_args, train_dataset=prompt_dataset(),
                            peft_config=lora_config(), task=ToyTask(),
                            processing_class=trainer.processing_class)
    assert preset.args.ips and not grpo_args.__dict__.get("ips")
    with pytest.raises(TypeError, match="GRPOConfig"):
        from transformers import TrainingArguments

        DivRLTrainer(str(tiny_qwen3), args=TrainingArguments(output_dir=str(tmp_path / "ta")), task=ToyTask())


@pytest.mark.parametrize(("overrides", "name", "tags", "paper_id"), [
    ({}, "GRPO", {"grpo", "divrl"}, "2402.03300"),
    ({"ips": True}, "IPS-GRPO", {"grpo", "divrl", "ips-grpo"}, "2601.21669"),
    ({"divergence": "js"}, "DPH-RL", {"grpo", "divrl", "dph-rl"}, "2509.07430"),
    ({"flowrl": True}, "FlowRL", {"divrl", "flowrl"}, "2509.15207"),
    ({"ips": True, "qd": True, "novelty_coef": 0.3}, "IPS-GRPO + QD-GRPO + MaxEnt-GRPO",
     {"grpo", "divrl", "ips-grpo", "qd-grpo", "maxent-grpo"}, None),
])
def test_model_card_names_and_cites_the_method_that_ran(
        tiny_qwen3: Path, tmp_path: Path, overrides: dict, name: str, tags: set, paper_id: str | None) -> None:
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer

    trainer = DivRLTrainer(str(tiny_qwen3), args=make_config(tmp_path, **overrides), train_dataset=prompt_dataset(),
                           processing_class=AutoTokenizer.from_pretrained(tiny_qwen3), peft_config=lora_config(),
                           task=ToyTask())
    trainer.create_model_card(model_name="run")
    card = (tmp_path / "README.md").read_text()
    assert f"This model was trained with {name}" in card
    assert f"Cite {name} as" in card
    header = card.split("---")[1]
    assert tags | {"trl"} <= {line.strip(" -") for line in header.splitlines()}
    assert ("grpo" in tags) == ("- grpo" in header)
    if paper_id is None:
        assert "huggingface.co/papers" not in card
    else:
        assert f"huggingface.co/papers/{paper_id}" in card
    assert ("DeepSeekMath" in card) == (name == "GRPO")
    if "ips" in overrides:
        assert "Inverse Probability Scaling" in card
    if "qd" in overrides:
        assert card.count("Avoiding Convergence and Diversity Collapse") == 1  # QD and MaxEnt share the
        # execution-rewards paper
    assert set(tags) <= set(trainer.model.model_tags or [])
