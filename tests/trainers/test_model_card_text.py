"""What a model card says (issue 60): full citations, the command as typed without absolute paths, and held-out
numbers above the training batch's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from divrl.methods import REGISTRY, papers
from divrl.methods.papers import reference
from divrl.train import recipe_command
from divrl.trainers.model_card import add_held_out, metrics_at_save, portable_args, saved_name


def test_a_reference_names_the_authors_the_year_and_the_arxiv_id() -> None:
    assert reference("Sinha, Abhijeet and Elango, Sundari and Liu, Dianbo", 2026, "Title", "2601.21669") == \
        "Sinha, Elango and Liu (2026). Title. arXiv:2601.21669"
    assert reference("Guo, Jeff and Schwaller, Philippe", 2024, "T", None) == "Guo and Schwaller (2024). T"
    assert reference("Long Li and Jiaran Hao and others", 2025, "T", "1") == "Li et al. (2025). T. arXiv:1"
    assert reference("A, B and C, D and E, F and G, H", 2020, "T", "2").startswith("A et al. (2020)")


def test_every_methods_paper_is_cited_in_full() -> None:
    cited = {id(card.paper): card.paper for method in REGISTRY.values() for card in method.cards()}
    assert papers.IPS["id"] == "2601.21669" and "Sinha, Abhijeet" in papers.IPS["citation"]
    for paper in cited.values():
        assert "author" in paper["citation"] and "year" in paper["citation"], paper["title"]
        if paper is not papers.EXECUTION_REWARDS:  # an anonymous submission: no arXiv id to give
            assert paper["id"] and f"arXiv:{paper['id']}" in paper["reference"], paper["title"]


def test_absolute_paths_are_written_relative_to_the_working_folder_or_home() -> None:
    cwd, home = Path("/work/clone"), Path("/home/me")
    args = ["train", "/work/clone/recipes/x.yaml", "--output_dir=/home/me/runs/a", "--model", "/opt/m", "/work/clone",
            "--seed", "1"]
    assert portable_args(args, cwd, home) == ["train", "recipes/x.yaml", "--output_dir=~/runs/a", "--model", "/opt/m",
                                              ".", "--seed", "1"]


def test_the_card_records_the_command_the_user_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    cwd = Path.cwd()
    monkeypatch.setattr(sys, "argv", ["/any/venv/bin/divrl", "demo", "--out", str(cwd / "demo_out")])
    internal = ["--config", str(cwd / "recipes" / "grpo.yaml"), "--output_dir", str(cwd / "demo_out" / "grpo")]
    assert recipe_command(internal) == "divrl demo --out demo_out"  # the demo's trainings run inside `divrl demo`
    monkeypatch.setattr(sys, "argv", ["/any/site-packages/divrl/train.py"])  # accelerate launch -m divrl.train
    assert recipe_command(internal) == "divrl train recipes/grpo.yaml --output_dir demo_out/grpo"


def test_held_out_numbers_come_before_the_training_batchs() -> None:
    history = [{"loss": 0.1, "reward": 0.0, "step": 1}, {"divrl/eval/recovery@8": 0.25, "step": 2},
               {"loss": 0.2, "reward": 1.0, "step": 2}]
    assert [heading for heading, _ in metrics_at_save(history)] == ["held-out evaluation, step 2",
                                                                    "last logged training step, step 2"]


def test_the_demos_held_out_evaluation_goes_above_the_training_metrics(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# run\n\n| | |\n\n## Metrics at save (last logged training step, step 8)\n\n"
                                        "| loss | 0 |\n")
    add_held_out(tmp_path, "divrl demo, after training", {"validity": 0.5, "RR@8": 0.25}, "What was sampled.")
    card = (tmp_path / "README.md").read_text()
    assert card.index("## Held-out evaluation (divrl demo, after training)") < card.index("## Metrics at save")
    assert "What was sampled." in card and "| RR@8 | 0.25 |" in card and "| validity | 0.5 |" in card


def test_the_final_save_is_named_after_the_run_not_its_staging_folder(tmp_path: Path) -> None:
    from divrl.trainers.checkpoint import FINAL_STAGING

    assert saved_name(str(tmp_path / "ips" / FINAL_STAGING)) == saved_name(str(tmp_path / "ips")) == "ips"
    assert saved_name(str(tmp_path / "ips" / "checkpoint-2")) == "checkpoint-2"
