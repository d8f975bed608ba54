"""Recipes say which generation backend they use; vLLM-colocate variants on a bf16 base (issue 14 item 18)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from divrl.cli import main as cli_main
from divrl.train import parse_recipe

RECIPES = Path(__file__).parents[2] / "recipes"
spec = importlib.util.spec_from_file_location("recipe_generator", RECIPES / "generate.py")
generator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(generator)


def test_every_recipe_names_its_generation_backend_and_why() -> None:
    for path in RECIPES.glob("*/*/*.yaml"):
        header = [line for line in path.read_text().splitlines() if line.startswith("# Generation: ")]
        assert len(header) == 1, path
        settings = yaml.safe_load(path.read_text())
        uses_vllm = settings.get("use_vllm", False)
        assert header[0].startswith("# Generation: vLLM" if uses_vllm else "# Generation: transformers generate")
        if settings.get("quantize") != "none":  # a 4-bit base (on CUDA) says why it is not vLLM
            assert not uses_vllm and "4-bit" in header[0] and "merging" in header[0]


@pytest.mark.parametrize("family", ["gemma-3-4b-it", "qwen3-4b"])
def test_vllm_colocate_variants_use_a_bf16_base_for_every_method(family: str) -> None:
    variants = sorted((RECIPES / f"{family}-vllm").glob("*/*.yaml"))
    originals = sorted((RECIPES / family).glob("*/*.yaml"))
    assert [p.relative_to(p.parents[1]) for p in variants] == [p.relative_to(p.parents[1]) for p in originals]
    assert {p.stem for p in variants} == set(generator.METHODS)  # population included: its base is not quantised
    for path in variants:
        settings = yaml.safe_load(path.read_text())
        assert settings["use_vllm"] is True and settings["vllm_mode"] == "colocate"
        assert settings["quantize"] == "none" and settings["dtype"] == "bfloat16" and settings["bf16"] is True
        original = yaml.safe_load((RECIPES / family / path.parent.name / path.name).read_text())
        differing = {k for k in settings.keys() | original.keys() if settings.get(k) != original.get(k)}
        assert differing == {"quantize", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
                             "vllm_max_model_length", "output_dir"}


def test_dry_run_of_a_vllm_recipe_generates_with_transformers_on_the_cpu(tmp_path: Path) -> None:
    recipe = RECIPES / "qwen3-4b-vllm" / "hypospace-voxel" / "pop.yaml"
    _, config, _ = parse_recipe(["--config", str(recipe), "--dry_run", "true", "--output_dir", str(tmp_path)])
    assert config.use_cpu and not config.use_vllm


def test_population_with_vllm_on_a_quantised_base_is_refused_naming_quantize(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "pop.yaml"
    settings = yaml.safe_load((RECIPES / "qwen3-4b-vllm" / "hypospace-voxel" / "pop.yaml").read_text())
    recipe.write_text(yaml.safe_dump({**settings, "quantize": "auto", "use_cpu": True, "bf16": False}))
    assert cli_main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"recipe {recipe}: quantize 'auto' with population and use_vllm" in err
