"""Misconfiguration fails at construction with a message naming the field; presets switch their method on."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from trainer_helpers import ToyTask, distinct_chars_reward, lora_config, make_config, prompt_dataset


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"ips_epsilon": 0.0}, "ips_epsilon"),
        ({"ips_outcome_key": "hash"}, "ips_outcome_key"),
        ({"qd_dims": [0, 3]}, "qd_dims"),
        ({"qd_dims": [4, 4], "qd_ranges": [0, 1]}, "qd_ranges"),
        ({"qd_ranges": [1, 0]}, "qd_ranges"),
        ({"qd_ranges": [0, 1, 2]}, "qd_ranges"),
        ({"qd_archive": "local"}, "qd_archive"),
        ({"qd_beta_new": -1.0}, "qd_beta_new"),
        ({"maxent_entropy_target": 1.0, "use_adaptive_entropy": True}, "maxent_entropy_target"),
        ({"maxent_entropy_target": 1.0, "entropy_coef": 0.1}, "maxent_entropy_target"),
        ({"maxent_entropy_target": "auto", "use_adaptive_entropy": True}, "maxent_entropy_target"),
        ({"maxent_entropy_target": "auto", "maxent_alpha_max": 1.0}, "maxent_entropy_target"),  # dual descent's
        ({"maxent_entropy_target": "auto", "entropy_target": 0.5}, "maxent_entropy_target"),  # 'auto' sets it
        ({"maxent_alpha_lr": 0.0}, "maxent_alpha_lr"),
        ({"novelty_k": 0}, "novelty_k"),
        ({"novelty_embedding": "bert"}, "novelty_embedding"),
        ({"length_bins": 5}, "length_bins"),  # > num_generations (4)
        ({"length_bins": 2, "multi_objective_aggregation": "normalize_then_sum"}, "length_bins"),
        ({"divergence": "hellinger"}, "divergence"),
        ({"divergence": "js", "divergence_coef": -0.1}, "divergence_coef"),
        ({"divergence": "js", "divergence_estimator": "rehearsal"}, "divergence_rehearsal_path"),
        ({"qd": True, "multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation"),
        ({"novelty_coef": 0.1, "multi_objective_aggregation": "normalize_then_sum"}, "multi_objective_aggregation"),
        ({"unlikeliness_beta": 1.5}, "unlikeliness_beta"),
        ({"cov_method": "cov"}, "cov_method"),
        ({"cov_method": "kl_cov"}, "cov_method"),  # a batch used once: |log pi - log pi_old| = 0
        ({"cov_method": "clip_cov", "cov_ratio": 0.0}, "cov_ratio"),
        ({"cov_method": "clip_cov", "cov_clip_bounds": [5.0, 1.0]}, "cov_clip_bounds"),
        ({"semantic_threshold": 2.0}, "semantic_threshold"),
        ({"semantic_embedding": "bert"}, "semantic_embedding"),
        ({"semantic_max_classes": 0}, "semantic_max_classes"),
        ({"passk": 1}, "passk"),
        ({"passk": 4}, "passk"),  # = num_generations (4): one subset, zero advantages
        ({"passk": 2, "length_bins": 2}, "passk"),
        ({"passk": 2, "scale_rewards": "batch"}, "passk"),
    ],
)
def test_bad_config_names_the_field(overrides: dict[str, Any], field: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"DivRLConfig\.{field}\b"):
        make_config(tmp_path, **overrides)


def test_flat_and_paired_ranges_are_the_same(tmp_path: Path) -> None:
    flat = make_config(tmp_path, qd_dims=[2, 3], qd_ranges=[0, 1, -1, 1])
    paired = make_config(tmp_path, qd_dims=[2, 3], qd_ranges=[[0, 1], [-1, 1]])
    assert flat.qd_ranges == paired.qd_ranges == [[0.0, 1.0], [-1.0, 1.0]]


class _NoHooks:
    name = "bare"

    def reward_funcs(self) -> list:
        return [distinct_chars_reward]


@pytest.mark.parametrize(
    ("overrides", "task", "field"),
    [
        ({"qd": True}, _NoHooks(), "qd"),
        ({"qd": True}, None, "qd"),
        ({"qd": True, "qd_dims": [4, 4, 4]}, ToyTask(), "qd_dims"),  # ToyTask.behavior_dims == 2
        ({"ips": True, "ips_outcome_key": "task"}, _NoHooks(), "ips_outcome_key"),
        ({"novelty_coef": 0.3, "novelty_embedding": "task"}, _NoHooks(), "novelty_embedding"),
        ({"ips": True, "ips_outcome_key": "semantic", "semantic_embedding": "task"}, _NoHooks(), "semantic_embedding"),
    ],
)
def test_missing_task_hook_names_the_field(overrides: dict[str, Any], task: Any, field: str, tiny_qwen3: Path,
                                           tmp_path: Path) -> None:
    from divrl import DivRLTrainer

    with pytest.raises(ValueError, match=rf"DivRLConfig\.{field}\b"):
        DivRLTrainer(str(tiny_qwen3), distinct_chars_reward, args=make_config(tmp_path, **overrides), task=task)


def test_ips_without_outcome_hook_warns_and_uses_text(tiny_qwen3: Path, tmp_path: Path, caplog) -> None:
    from divrl.methods.hooks import normalized_text_key, resolve_task_hooks

    with caplog.at_level(logging.WARNING):
        hooks = resolve_task_hooks(make_config(tmp_path, ips=True), _NoHooks())
    assert hooks.outcome_key is normalized_text_key
    assert "normalised completion text" in caplog.text
    assert normalized_text_key("  The  Answer\n") == normalized_text_key("the answer") == "the answer"
    assert normalized_text_key("   ") is None


def test_presets_switch_their_method_on(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from divrl import DivergenceGRPOTrainer, MaxEntGRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    maxent = MaxEntGRPOTrainer(str(tiny_qwen3), distinct_chars_reward, args=make_config(tmp_path, novelty_k=3),
                               train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    assert (maxent.args.maxent_entropy_target, maxent.args.novelty_coef, maxent.args.length_bins) == ("auto", 0.3, 3)
    assert maxent.args.novelty_k == 3
    divergence = DivergenceGRPOTrainer(str(tiny_qwen3), distinct_chars_reward,
                                       args=make_config(tmp_path, divergence="forward_kl"),
                                       train_dataset=prompt_dataset(), processing_class=tokenizer,
                                       peft_config=lora_config())
    assert divergence.args.divergence == "forward_kl"  # a configured value wins over the preset
    from divrl import PassAtKGRPOTrainer, UnlikelinessGRPOTrainer

    for trainer_class, field, value in ((UnlikelinessGRPOTrainer, "unlikeliness_beta", 0.25),
                                        (PassAtKGRPOTrainer, "passk", 4)):
        trainer = trainer_class(str(tiny_qwen3), distinct_chars_reward,
                                args=make_config(tmp_path, num_generations=8, per_device_train_batch_size=8),
                                train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
        assert getattr(trainer.args, field) == value


def test_explicit_values_win_over_presets_even_when_equal_to_the_default(tiny_qwen3: Path, tmp_path: Path) -> None:
    # Issue 14.4: MaxEntGRPOTrainer with an explicit novelty_coef=0.0 trained with the preset's 0.3.
    from transformers import AutoTokenizer

    from divrl import DivergenceGRPOTrainer, MaxEntGRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen3)
    maxent = MaxEntGRPOTrainer(str(tiny_qwen3), distinct_chars_reward,
                               args=make_config(tmp_path, novelty_coef=0.0, length_bins=0),
                               train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    assert (maxent.args.maxent_entropy_target, maxent.args.novelty_coef, maxent.args.length_bins) == ("auto", 0.0, 0)
    assert not maxent.args.novelty_enabled and not maxent.args.length_bins_enabled
    divergence = DivergenceGRPOTrainer(str(tiny_qwen3), distinct_chars_reward,
                                       args=make_config(tmp_path, divergence=None),
                                       train_dataset=prompt_dataset(), processing_class=tokenizer,
                                       peft_config=lora_config())
    assert divergence.args.divergence is None


@pytest.mark.parametrize("source", ["python", "cli", "recipe"])
def test_presets_fill_only_unset_fields_from_python_cli_and_recipes(source: str, tmp_path: Path) -> None:
    from trl import TrlParser

    from divrl import DivRLConfig, IPSGRPOTrainer, MaxEntGRPOTrainer, PopulationGRPOTrainer

    explicit = {"novelty_coef": 0.0, "ips": False, "maxent_entropy_target": 1.5}

    def build(values: dict[str, Any]) -> Any:
        values = {"output_dir": str(tmp_path), "use_cpu": True, "bf16": False, **values}
        if source == "python":
            return DivRLConfig(**values)
        parser = TrlParser((DivRLConfig,))
        if source == "cli":
            argv = [x for k, v in values.items() for x in (f"--{k}", str(v))]
        else:
            recipe = tmp_path / "recipe.yaml"
            recipe.write_text("".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}\n"
                                      for k, v in values.items()))
            argv = ["--config", str(recipe)]
        return parser.parse_args_and_config(argv)[0]

    config = build(explicit)
    assert (config.novelty_coef, config.ips, config.maxent_entropy_target) == (0.0, False, 1.5)
    for preset in (MaxEntGRPOTrainer.preset, IPSGRPOTrainer.preset, PopulationGRPOTrainer.preset):
        config.apply_preset(preset)
    # Set by the user: kept. Unset: the presets' values.
    assert (config.novelty_coef, config.ips, config.maxent_entropy_target) == (0.0, False, 1.5)
    assert (config.length_bins, config.population) == (3, True)
    fresh = build({})
    assert (fresh.ips, fresh.novelty_coef, fresh.length_bins, fresh.divergence) == (False, 0.0, 0, None)
    fresh.apply_preset(MaxEntGRPOTrainer.preset)
    assert (fresh.maxent_entropy_target, fresh.novelty_coef, fresh.length_bins) == ("auto", 0.3, 3)
    with pytest.raises(ValueError, match="DivRLConfig.novelty_k cannot take a preset"):
        fresh.apply_preset({"novelty_k": 3})


def test_a_bare_switch_flag_still_turns_its_method_on(tmp_path: Path) -> None:
    from trl import TrlParser

    from divrl import DivRLConfig

    (config,) = TrlParser((DivRLConfig,)).parse_args_and_config(["--output_dir", str(tmp_path), "--use_cpu", "true",
                                                                 "--bf16", "false", "--ips", "--qd", "false"])
    assert config.ips is True and config.qd is False and "ips" not in config._unset_fields


def test_import_divrl_stays_light() -> None:
    code = "import sys, divrl; heavy = {'torch', 'trl', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    subprocess.run([sys.executable, "-c", code], check=True)


class _BadHooks:
    """Hooks whose outputs the methods cannot use: the trainer must say which hook, not fail deep inside."""

    name = "bad"
    behavior_dims = 2

    def reward_funcs(self) -> list:
        return [distinct_chars_reward]

    def outcome_key(self, completion: str, **_: Any) -> Any:
        return None if completion == "none" else list(completion)

    def behavior(self, completion: str, **_: Any) -> Any:
        return {"none": None, "ok": (0.5, 1)}.get(completion, (0.1, 0.2, 0.3))

    def embed(self, completion: str, **_: Any) -> Any:
        return None if completion == "none" else [[1.0, 2.0]]


def test_unusable_hook_output_names_the_hook(tmp_path: Path) -> None:
    from divrl.methods.hooks import resolve_task_hooks

    hooks = resolve_task_hooks(make_config(tmp_path, ips=True, qd=True, novelty_coef=0.1, novelty_embedding="task"),
                               _BadHooks())
    assert hooks.outcome_key("none") is None and hooks.behavior("none") is None and hooks.embed("none") is None
    assert hooks.behavior("ok") == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"task\.outcome_key returned an unhashable list"):
        hooks.outcome_key("abc")
    with pytest.raises(ValueError, match=r"task\.behavior returned .* expected None or 2 finite numbers"):
        hooks.behavior("abc")
    with pytest.raises(ValueError, match=r"task\.embed returned .* flat sequence of numbers"):
        hooks.embed("abc")
    assert hooks.task_outcome_key is hooks.outcome_key  # IPS and the collapse metrics share the checked hook
