"""`divrl train` builds LoRA with TRL's get_peft_config and forwards the loading options (issue 14 item 15)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from trl import ModelConfig

from divrl.cli import main as cli_main
from divrl.models import default_lora_config, lora_config_from_model_args
from divrl.train import build_trainer, parse_recipe

ROOT = Path(__file__).resolve().parents[2]
VOXEL = ROOT / "recipes" / "embedded-cpu" / "hypospace-voxel"


def _build(monkeypatch: pytest.MonkeyPatch, recipe: Path, *overrides: str) -> tuple[dict, dict]:
    """Run build_trainer up to the trainer with the model load and the trainer faked; (load kwargs, trainer kwargs)."""
    import divrl.models
    import divrl.trainers.divrl_trainer

    loaded: dict[str, Any] = {}
    built: dict[str, Any] = {}

    def load(name: str, **kwargs: Any) -> tuple[SimpleNamespace, SimpleNamespace]:
        loaded.update(kwargs, name=name)
        # a model without a stated context length: the context check (tested in test_run_hazards.py) has none to use
        model = SimpleNamespace(config=SimpleNamespace(max_position_embeddings=None))
        return model, SimpleNamespace(chat_template=None)

    monkeypatch.setattr(divrl.models, "load_model_and_tokenizer", load)
    monkeypatch.setattr(divrl.trainers.divrl_trainer, "DivRLTrainer",
                        lambda **kwargs: built.update(kwargs) or SimpleNamespace())  # a trainer build_trainer can label
    build_trainer(*parse_recipe(["--config", str(recipe), "--recovery_eval", "false", *overrides]))
    return loaded, built


def test_every_lora_option_of_model_config_reaches_the_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    _, built = _build(monkeypatch, VOXEL / "ips.yaml", "--use_dora", "true", "--use_rslora", "true",
                      "--lora_modules_to_save", "lm_head", "--lora_target_parameters", "mlp.experts.down_proj",
                      "--lora_r", "4")
    config = built["peft_config"]
    assert config.use_dora and config.use_rslora and config.r == 4
    assert config.modules_to_save == ["lm_head"] and config.target_parameters == ["mlp.experts.down_proj"]


def test_recipe_defaults_give_divrls_default_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    _, built = _build(monkeypatch, VOXEL / "ips.yaml", "--lora_r", "16", "--lora_alpha", "32", "--lora_dropout", "0.05")
    assert built["peft_config"].to_dict() == default_lora_config().to_dict()
    _, built = _build(monkeypatch, VOXEL / "ips.yaml", "--lora_target_modules", "q_proj", "v_proj")
    assert set(built["peft_config"].target_modules) == {"q_proj", "v_proj"}
    _, built = _build(monkeypatch, VOXEL / "ips.yaml", "--use_peft", "false")
    assert built["peft_config"] is None


def test_loading_options_are_forwarded(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded, _ = _build(monkeypatch, VOXEL / "ips.yaml", "--attn_implementation", "sdpa", "--model_revision", "v1.0",
                       "--trust_remote_code", "true")
    assert loaded["attn_implementation"] == "sdpa" and loaded["revision"] == "v1.0" and loaded["trust_remote_code"]


@pytest.mark.parametrize("option, value", [("use_dora", "true"), ("lora_modules_to_save", "lm_head"),
                                           ("lora_target_parameters", "mlp.experts.down_proj")])
def test_population_refuses_what_it_cannot_soup_before_loading(
    option: str, value: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import divrl.models

    monkeypatch.setattr(divrl.models, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("model loaded"))
    recipe = tmp_path / "pop.yaml"
    recipe.write_text(yaml.safe_dump({**yaml.safe_load((VOXEL / "pop.yaml").read_text()), option: value}))
    assert cli_main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"recipe {recipe}: {option} cannot be used with population" in err
    model_args = ModelConfig(use_peft=True, **{option: True if value == "true" else [value]})
    with pytest.raises(ValueError, match=f"{option}=.* cannot be used with population"):
        lora_config_from_model_args(model_args, SimpleNamespace(population=True))
    assert lora_config_from_model_args(model_args, SimpleNamespace(population=False)) is not None
