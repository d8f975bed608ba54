"""Hub ids load offline from the Hugging Face cache: a fake cache holding a snapshot of a tiny local checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from divrl import models

HUB_ID = "divrl-tests/tiny-qwen3"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
RECIPE = Path(__file__).parents[2] / "recipes" / "embedded-cpu" / "hypospace-voxel" / "ips.yaml"


@pytest.fixture
def offline_hub_cache(tiny_qwen3: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HUB_CACHE pointing at a cache that holds `HUB_ID` at `COMMIT` (refs/main), with HF_HUB_OFFLINE=1."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / f"models--{HUB_ID.replace('/', '--')}"
    shutil.copytree(tiny_qwen3, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # huggingface_hub reads both variables once at import; transformers looks them up on these constants.
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_hub_id_loads_offline_from_the_cache(offline_hub_cache: Path, tiny_qwen3: Path) -> None:
    import torch

    model, tokenizer = models.load_model_and_tokenizer(HUB_ID, quantize="none", log=lambda _: None)
    local, _ = models.load_model_and_tokenizer(str(tiny_qwen3), quantize="none", log=lambda _: None)
    assert model.config._name_or_path == HUB_ID and tokenizer.pad_token is not None
    for (name, weight), (_, expected) in zip(model.state_dict().items(), local.state_dict().items(), strict=True):
        torch.testing.assert_close(weight, expected, msg=name)


def test_hub_id_missing_from_the_cache_is_a_clear_error(offline_hub_cache: Path) -> None:
    with pytest.raises(ValueError, match="(?s)could not load model 'divrl-tests/not-cached'.*embedded:gemma-3-270m"):
        models.load_model_and_tokenizer("divrl-tests/not-cached", quantize="none", log=lambda _: None)


@pytest.mark.slow
def test_divrl_train_runs_a_cached_hub_id_offline(offline_hub_cache: Path, tmp_path: Path) -> None:
    from divrl.cli import main

    out = tmp_path / "run"
    small = ["--max_steps", "1", "--per_device_train_batch_size", "4", "--num_generations", "4",
             "--max_completion_length", "8"]
    assert main(["train", str(RECIPE), "--model_name_or_path", HUB_ID, "--output_dir", str(out), *small]) == 0
    assert (out / "adapter_model.safetensors").is_file()
    assert HUB_ID in (out / "adapter_config.json").read_text()  # the adapter names its base model by hub id
