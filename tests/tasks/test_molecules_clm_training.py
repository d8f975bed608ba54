"""Every method's recipe trains a step of the shipped chemical LM (`embedded:smiles-clm`) on the molecule task, from
the empty (BOS-only) prompt, with the recipe's own settings (full fine-tuning, 64 molecules a step)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RECIPES = Path(__file__).parents[2] / "recipes" / "smiles-clm-cpu" / "molecules"
METHODS = sorted(path.stem for path in RECIPES.glob("*.yaml"))


def test_the_chemical_lm_recipes_cover_every_method_family() -> None:
    assert {"grpo", "ips", "qd", "maxent", "fkl", "pop", "flowrl"} <= set(METHODS)


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
def test_every_method_trains_a_step_of_the_shipped_chemical_lm(method: str, tmp_path: Path) -> None:
    from divrl.cli import main

    assert main(["train", str(RECIPES / f"{method}.yaml"), "--max_steps", "1", "--output_dir", str(tmp_path),
                 "--save_strategy", "no"]) == 0
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    logs = {k: v for entry in state["log_history"] for k, v in entry.items()}
    assert state["global_step"] == 1
    assert logs["molecules/validity"] > 0.5  # the pretrained prior writes valid SMILES from BOS alone
    assert logs["molecules/oracle_calls"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("method", ["reinvent", "replay", "set-diversity", "reinvent-replay"])
def test_the_molecule_baselines_compose_with_ips_the_filter_and_a_pmo_oracle(method: str, tmp_path: Path) -> None:
    """Two steps of each baseline with IPS, the Murcko bucket-10 filter and a PMO oracle on the shipped chemical LM."""
    from divrl.cli import main

    assert main(["train", str(RECIPES / f"{method}.yaml"), "--ips", "true", "--max_steps", "2",
                 "--task_arg", "diversity_filter={scaffold: murcko, bucket_size: 10}",
                 "--task_arg", "objective=median1", "--output_dir", str(tmp_path), "--save_strategy", "no",
                 "--logging_steps", "1"]) == 0
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    keys = {k for entry in state["log_history"] for k in entry}
    assert state["global_step"] == 2 and "ips/distinct_outcomes" in keys
    assert {"reinvent": "reinvent/loss", "replay": "replay/loss", "set-diversity": "set_diversity/credit",
            "reinvent-replay": "replay/loss"}[method] in keys
