"""`divrl sample-reference` writes a rehearsal set the trainer can read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_cli_writes_a_rehearsal_set(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.cli import main
    from divrl.methods.rehearsal import META_FILE, RehearsalSet

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "solve 2 + 3"}\n\n{"prompt": [{"role": "user", "content": "hi"}]}\n')
    out = tmp_path / "rehearsal"
    code = main(["sample-reference", "--model", str(tiny_qwen3), "--prompts", str(prompts), "--out", str(out),
                 "--num-samples", "3", "--max-new-tokens", "5", "--temperature", "0.9", "--quantize", "none"])
    assert code == 0
    meta = json.loads((out / META_FILE).read_text())
    assert (meta["temperature"], meta["num_prompts"], meta["num_samples"]) == (0.9, 2, 3)
    rehearsal = RehearsalSet(out, temperature=0.9)
    assert len(rehearsal) == 6
    batch = rehearsal.batch(range(6), pad_token_id=0)
    lengths = batch["completion_mask"].sum(dim=1)
    assert bool(((lengths >= 1) & (lengths <= 5)).all())
    assert bool((batch["ref_logps"][batch["completion_mask"].bool()] < 0).all())  # real log-probs
    assert bool((batch["ref_logps"][~batch["completion_mask"].bool()] == 0).all())  # padding


def test_bad_prompts_file_is_reported(tmp_path: Path) -> None:
    from divrl.task import read_prompts

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_prompts(bad, "prompt")
    with pytest.raises(ValueError, match="expected an object with a 'question' field"):
        read_prompts(_write(tmp_path, "{\"prompt\": \"x\"}\n"), "question")
    with pytest.raises(ValueError, match="does not exist"):
        read_prompts(tmp_path / "missing.jsonl", "prompt")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    return path


def _sample(model_dir: Path, out: Path, score, **options):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from divrl.trainers.rehearsal import sample_reference

    return sample_reference(AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir),
                            ["solve 2 + 3", "the answer is"], out, num_samples=3, max_new_tokens=4, score=score,
                            **options)


def test_dph_rl_split_keeps_solved_prompts_for_rehearsal_and_the_rest_for_exploration(tiny_qwen3: Path,
                                                                                    tmp_path: Path) -> None:
    from datasets import load_from_disk

    from divrl.methods.rehearsal import RehearsalSet
    from divrl.trainers.rehearsal import EXPLORATION_FILE

    out = _sample(tiny_qwen3, tmp_path / "split", lambda index, text: float(index == 0), split=True)
    rows = load_from_disk(str(out))
    assert len(RehearsalSet(out, temperature=1.0)) == 3 and set(rows["prompt"]) == {json.dumps("solve 2 + 3")}
    assert rows["reward"] == [1.0, 1.0, 1.0]
    assert (out / EXPLORATION_FILE).read_text() == json.dumps({"prompt": "the answer is"}) + "\n"
    assert json.loads((out / "divrl_rehearsal.json").read_text())["rehearsal_prompts"] == 1


def test_correct_only_keeps_every_prompts_correct_samples(tiny_qwen3: Path, tmp_path: Path) -> None:
    from datasets import load_from_disk

    out = _sample(tiny_qwen3, tmp_path / "correct", lambda index, text: float(index == 1), correct_only=True)
    assert set(load_from_disk(str(out))["prompt"]) == {json.dumps("the answer is")}
    with pytest.raises(ValueError, match="no prompt was solved in all 3 reference samples"):
        _sample(tiny_qwen3, tmp_path / "none", lambda index, text: 0.0, split=True)
    with pytest.raises(ValueError, match="needs a score function"):
        _sample(tiny_qwen3, tmp_path / "unscored", None, correct_only=True)


def test_recipe_task_scores_with_the_tasks_first_reward(tiny_qwen3: Path) -> None:
    from transformers import AutoTokenizer

    from divrl.sample_reference_cli import _RecipeTask

    recipe = _RecipeTask(str(Path(__file__).parents[2] / "recipes/embedded-cpu/hypospace-boolean/js.yaml"))
    recipe.load_prompts(AutoTokenizer.from_pretrained(tiny_qwen3))
    assert recipe.stop_strings == ("\nEND",) and len(recipe.prompts) == len(recipe.rows) > 0
    observations = recipe.rows[0]["observations"]
    assert recipe.score(0, "garbage") == 0.0
    valid = next(answer for answer in (" NOT x\nEND", " x\nEND", " NOT y\nEND", " y\nEND")
                 if recipe.score(0, answer) > 0)  # one of them fits any single observation
    assert valid and observations


def test_train_prompts_keep_only_the_listed_rows(tmp_path: Path) -> None:
    from datasets import Dataset

    from divrl.train import keep_listed_prompts

    dataset = Dataset.from_dict({"prompt": ["a", "b", "c"], "id": [1, 2, 3]})
    listed = _write(tmp_path, '{"prompt": "c"}\n{"prompt": "a"}\n')
    assert keep_listed_prompts(dataset, listed)["id"] == [1, 3]
    with pytest.raises(ValueError, match="none of the 1 prompts"):
        keep_listed_prompts(dataset, _write(tmp_path, '{"prompt": "z"}\n'))


def test_cli_with_a_recipe_samples_the_training_prompts_and_judges_them(tiny_qwen3: Path, tmp_path: Path,
                                                                       capsys) -> None:
    # A random tiny model writes no valid expression: the correct-only set would be empty, and the CLI says so.
    from divrl.cli import main

    recipe = Path(__file__).parents[2] / "recipes/embedded-cpu/hypospace-boolean/js.yaml"
    base = ["sample-reference", "--model", str(tiny_qwen3), "--recipe", str(recipe), "--num-samples", "1",
            "--max-new-tokens", "3", "--quantize", "none"]
    assert main([*base, "--out", str(tmp_path / "correct"), "--correct-only"]) == 2
    assert "no reference sample is correct" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "all")]) == 0
    meta = json.loads((tmp_path / "all" / "divrl_rehearsal.json").read_text())
    assert meta["stop_strings"] == ["\nEND"] and meta["num_prompts"] == meta["rows"] > 0
    assert main(["sample-reference", "--model", str(tiny_qwen3), "--prompts",
                 str(_write(tmp_path, '{"prompt": "a"}\n')), "--out", str(tmp_path / "x"), "--split"]) == 2
    assert "give --recipe" in capsys.readouterr().err


def test_no_cli_module_shadows_a_public_export() -> None:
    """A submodule imported by the CLI becomes an attribute of `divrl`, which would hide a lazy export of its name."""
    import importlib

    import divrl
    from divrl.cli import COMMANDS, EVAL_COMMANDS

    for module in [*COMMANDS.values(), *EVAL_COMMANDS.values()]:
        importlib.import_module(module)
    for name in divrl._LAZY_EXPORTS:
        assert not isinstance(getattr(divrl, name), type(divrl)), f"divrl.{name} is a module, not the export"
