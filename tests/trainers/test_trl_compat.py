"""TRL's contract as divrl's own tests: each GRPOConfig feature a TRL user relies on trains the same with
`GRPOTrainer` and with `DivRLTrainer` (every method off).

Each case trains 2 steps of a tiny model twice, once per class, on the same scripted completions (so the CPU sampler,
which draws another random stream than TRL's on purpose, is not what is compared) and checks the outcome: the same
per-step loss and the same LoRA weights after training. Cases that generate for real (beam search, a custom rollout,
tools) compare what both produced. Differences kept on purpose are named in docs/methods.md's TRL-compatibility
paragraph.
Vision-language models (a tiny Gemma 3 and a tiny LLaVA, built locally) train with image prompts through both
trainers, and through divrl's own CPU sampler, and evaluate with `divrl eval`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import Mock, patch

import pytest
import torch
from trainer_helpers import PROMPTS, base_settings, distinct_chars_reward, lora_config, prompt_dataset

TEXTS = ["abc e", "bcd", "xyz", "aeiou", "abc", "qqq", "hello", "xy o"]


def vowel_reward(completions: list, **_: Any) -> list[float]:
    """A second reward function (for reward weights and multi-objective aggregation)."""
    return [float(sum(ch in "aeiou" for ch in (c if isinstance(c, str) else c[-1]["content"]))) for c in completions]


def _classes(divrl: bool) -> tuple[type, type]:
    if divrl:
        from divrl import DivRLConfig, DivRLTrainer

        return DivRLTrainer, DivRLConfig
    from trl import GRPOConfig, GRPOTrainer

    return GRPOTrainer, GRPOConfig


def _train(divrl: bool, model: Path, out: Path, scripted: bool = True, resume: Any = None, trainer_kwargs=None,
           **settings: Any):
    """Train with GRPOTrainer (divrl False) or DivRLTrainer; return (trainer, per-step losses, LoRA weights)."""
    from transformers import AutoTokenizer

    from divrl.testing import scripted_generation

    trainer_cls, config_cls = _classes(divrl)
    tokenizer = AutoTokenizer.from_pretrained(model)
    reward_funcs = settings.pop("reward_funcs", [distinct_chars_reward])
    trainer = trainer_cls(str(model), reward_funcs=reward_funcs, args=config_cls(**base_settings(out, **settings)),
                          train_dataset=prompt_dataset(PROMPTS * 2), processing_class=tokenizer,
                          peft_config=lora_config(), **(trainer_kwargs or {}))
    if scripted:
        with scripted_generation(tokenizer, lambda prompt, row: TEXTS[(3 * trainer.state.global_step + row) % 8]):
            trainer.train(resume_from_checkpoint=resume)
    else:
        trainer.train(resume_from_checkpoint=resume)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    weights = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if "lora_" in name}
    return trainer, losses, weights


def _assert_same_outcome(grpo: tuple, divrl: tuple) -> None:
    (_, grpo_losses, grpo_weights), (_, divrl_losses, divrl_weights) = grpo, divrl
    assert len(grpo_losses) == len(divrl_losses) == 2
    assert divrl_losses == pytest.approx(grpo_losses, rel=1e-5, abs=1e-7)
    assert grpo_weights.keys() == divrl_weights.keys()
    for name, weight in grpo_weights.items():  # the CPU log-prob kernel rounds differently (sums in another order):
        # at learning rate 0.05 Adam turns that into <= 2e-5 of weight; a real difference in the loss moves ~0.05
        assert torch.allclose(weight, divrl_weights[name], rtol=1e-4, atol=1e-4), name


FEATURES = {
    "defaults": {},
    **{f"loss_type={kind}": {"loss_type": kind}
       for kind in ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")},
    "scale_rewards=batch": {"scale_rewards": "batch"},
    "scale_rewards=none": {"scale_rewards": "none"},
    "reward_weights": {"reward_funcs": [distinct_chars_reward, vowel_reward], "reward_weights": [1.0, 0.5]},
    "normalize_then_sum": {"reward_funcs": [distinct_chars_reward, vowel_reward],
                           "multi_objective_aggregation": "normalize_then_sum"},
    "top_entropy_quantile": {"top_entropy_quantile": 0.5},
    "entropy_coef": {"entropy_coef": 0.01},
    "adaptive_entropy": {"entropy_coef": 0.01, "use_adaptive_entropy": True, "entropy_target": 2.0},
    "epsilon_high+num_iterations": {"epsilon_high": 0.28, "num_iterations": 2},
    "beta (reference model)": {"beta": 0.04},
    "mask_truncated_completions": {"mask_truncated_completions": True, "max_completion_length": 3},
    "activation_checkpointing off": {"activation_checkpointing": False},
    "importance_sampling_level=sequence": {"importance_sampling_level": "sequence", "num_iterations": 2},
}


@pytest.mark.parametrize("settings", FEATURES.values(), ids=FEATURES.keys())
def test_each_grpo_feature_trains_the_same_with_both_trainers(settings: dict, tiny_qwen3: Path,
                                                               tmp_path: Path) -> None:
    grpo = _train(False, tiny_qwen3, tmp_path / "grpo", **dict(settings))
    divrl = _train(True, tiny_qwen3, tmp_path / "divrl", **dict(settings))
    _assert_same_outcome(grpo, divrl)


@pytest.mark.parametrize("divrl", [False, True], ids=["GRPOTrainer", "DivRLTrainer"])
def test_resume_from_checkpoint_reaches_the_uninterrupted_state(divrl: bool, tiny_qwen3: Path,
                                                                 tmp_path: Path) -> None:
    steady = {"lr_scheduler_type": "constant", "save_strategy": "steps", "save_steps": 1}  # same schedule at 2 and 3
    _, _, uninterrupted = _train(divrl, tiny_qwen3, tmp_path / "once", max_steps=3, **steady)
    _train(divrl, tiny_qwen3, tmp_path / "twice", max_steps=2, **steady)
    _, _, resumed = _train(divrl, tiny_qwen3, tmp_path / "twice", max_steps=3, resume=True, **steady)
    for name, weight in uninterrupted.items():
        assert torch.equal(weight, resumed[name]), name


def test_beam_search_generation_kwargs_give_the_same_completions(tiny_qwen3: Path, tmp_path: Path) -> None:
    """Real generation (no script): deterministic beam search through both trainers' generate paths."""
    settings = {"generation_kwargs": {"num_beams": 2, "do_sample": False}, "max_completion_length": 6,
                "max_steps": 1, "log_completions": True}
    runs = [_train(divrl, tiny_qwen3, tmp_path / str(divrl), scripted=False, **dict(settings))
            for divrl in (False, True)]
    completions = [list(trainer._logs["completion"]) for trainer, _, _ in runs]
    assert completions[0] == completions[1] and completions[0]


def test_a_custom_rollout_func_trains_the_same(tiny_qwen3: Path, tmp_path: Path) -> None:
    def rollout(prompts: list, trainer: Any) -> dict[str, Any]:
        tokenizer = trainer.processing_class
        ids = [tokenizer(p)["input_ids"] for p in prompts]
        completions = [tokenizer(TEXTS[i % 8], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                       for i in range(len(prompts))]
        return {"prompt_ids": ids, "completion_ids": completions, "logprobs": [[0.0] * len(c) for c in completions]}

    runs = [_train(divrl, tiny_qwen3, tmp_path / str(divrl), scripted=False, trainer_kwargs={"rollout_func": rollout})
            for divrl in (False, True)]
    _assert_same_outcome(*runs)


def test_divrl_overrides_work_on_objects_init_did_not_build() -> None:
    """Issue 29 item 2: TRL's tests (and users' subclasses) call hooks on `object.__new__` objects."""
    from trl import GRPOTrainer

    from divrl import DivRLTrainer

    entropies = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.2, 0.8]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    masks = []
    for cls in (GRPOTrainer, DivRLTrainer):
        trainer = object.__new__(cls)
        trainer.accelerator = Mock(pad_across_processes=lambda t, **_: t, gather=lambda t: t)
        masks.append(cls.get_high_entropy_mask(trainer, entropies, mask, 0.5))
    assert torch.equal(masks[0], masks[1])
    trainer = object.__new__(DivRLTrainer)
    with patch.object(GRPOTrainer, "_generate", return_value="generated"):
        trainer.args = Mock(unlikeliness_enabled=False)
        assert DivRLTrainer._generate(trainer, ["p"]) == "generated"


def test_generate_is_called_as_python_calls_it_and_a_users_generate_survives_training(
        tiny_qwen3: Path, tmp_path: Path) -> None:
    """Issue 29 item 3: a class-level mock of generate receives the model once; an instance `generate` the user sets
    after building the trainer is theirs: training uses it and leaves it in place."""
    from transformers import AutoTokenizer, GenerationMixin

    from divrl import DivRLConfig, DivRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    trainer = DivRLTrainer(str(tiny_qwen3), reward_funcs=[distinct_chars_reward],
                           args=DivRLConfig(**base_settings(tmp_path, max_steps=1)),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    causal_lm = trainer._causal_lm(trainer.model)
    input_ids = torch.tensor([[1, 2, 3]])
    with patch.object(GenerationMixin, "generate", Mock(return_value="mocked")) as mocked:
        assert causal_lm.generate(input_ids=input_ids, do_sample=True) == "mocked"
    assert "input_ids" in mocked.call_args.kwargs and causal_lm not in mocked.call_args.args

    with scripted_generation(tokenizer, lambda prompt, row: TEXTS[row % 8]):
        scripted = GenerationMixin.generate  # the script, installed at class level

        def users_generate(*args: Any, **kwargs: Any) -> Any:
            users_generate.calls += 1
            return scripted(causal_lm, *args, **kwargs)

        users_generate.calls = 0
        causal_lm.generate = users_generate
        trainer.train()
    assert users_generate.calls >= 1 and causal_lm.generate is users_generate


@pytest.fixture(scope="module", params=["gemma3", "llava"])
def tiny_vlm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from divrl.testing import build_tiny_vlm

    return build_tiny_vlm(request.param, tmp_path_factory.mktemp(request.param))


def _image_prompts():
    from datasets import Dataset
    from PIL import Image

    def content(i: int) -> list[dict]:
        return [{"type": "image"}, {"type": "text", "text": f"What is in image {i}?"}]

    return Dataset.from_list([{"prompt": [{"role": "user", "content": content(i)}],
                               "image": Image.new("RGB", (32, 32), color=(40 * i, 100, 50))} for i in range(4)])


def _train_vlm(divrl: bool, model: Path, out: Path, scripted: bool):
    from transformers import AutoProcessor

    from divrl.testing import scripted_generation

    trainer_cls, config_cls = _classes(divrl)
    processor = AutoProcessor.from_pretrained(model)
    trainer = trainer_cls(str(model), reward_funcs=[distinct_chars_reward], args=config_cls(**base_settings(out)),
                          train_dataset=_image_prompts(), processing_class=processor,
                          peft_config=lora_config(target_modules=r".*language_model.*\.(q_proj|v_proj)"))
    if scripted:
        with scripted_generation(processor.tokenizer, lambda p, row: TEXTS[(3 * trainer.state.global_step + row) % 8]):
            trainer.train()
    else:
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    weights = {name: p.detach().clone() for name, p in trainer.model.named_parameters() if "lora_" in name}
    return trainer, losses, weights


def test_a_vision_language_model_trains_the_same_with_both_trainers(tiny_vlm: Path, tmp_path: Path) -> None:
    _assert_same_outcome(_train_vlm(False, tiny_vlm, tmp_path / "grpo", scripted=True),
                         _train_vlm(True, tiny_vlm, tmp_path / "divrl", scripted=True))


def test_a_vision_language_model_trains_and_evaluates_through_divrls_cpu_path(tiny_vlm: Path, tmp_path: Path) -> None:
    """Issue 29 item 1: divrl's CPU sampler prefills each distinct prompt once; image inputs (features in nested
    containers in transformers 5) must prefill whole instead of failing with "Image features and image tokens do
    not match". Then the trained adapter evaluates with `divrl eval task`."""
    import math

    from divrl.cli import main as cli_main

    trainer, losses, _ = _train_vlm(True, tiny_vlm, tmp_path / "run", scripted=False)
    assert len(losses) == 2 and all(math.isfinite(loss) for loss in losses)
    trainer.save_model(str(tmp_path / "adapter"))
    assert cli_main(["eval", "task", "--task", "countdown", "--task-arg", "instances=4", "--model",
                     str(tmp_path / "adapter"), "--samples", "2", "--max-new-tokens", "4", "--no-progress",
                     "--out", str(tmp_path / "eval")]) == 0
