"""`divrl sft`: warm-start data of admissible answers, a LoRA run through TRL's SFTTrainer, the merged model."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from divrl.tasks.hypospace import make_task

RECIPES = Path(__file__).parents[2] / "recipes" / "sft"


def test_sft_rows_are_distinct_admissible_answers_ending_at_the_stop() -> None:
    task = make_task("voxel", grid=2, max_height=2, max_blocks=2)
    rows = task.sft_dataset(limit=30, per_instance=3, sample_seed=1)
    instances = {i.id: i for i in task.split("train", limit=30)}
    per_instance = Counter(rows["id"])
    assert per_instance == {i: min(3, len(inst.hypotheses)) for i, inst in instances.items()}
    validity = task.reward_funcs()[0]
    for row in rows:
        assert row["prompt"].endswith(task.answer_label) and "END" not in row["prompt"]  # zero-shot prompt
        assert row["completion"].endswith("\nEND") and row["completion"].count("END") == 1
        hypotheses = instances[row["id"]].hypotheses
        assert validity(prompts=[row["prompt"]], completions=[row["completion"]],
                        observations=[list(instances[row["id"]].observations)],
                        hypotheses=[list(hypotheses)]) == [1.0]
    answers = [task.parse(r["completion"]) for r in rows]
    assert len({(i, a) for i, a in zip(rows["id"], answers, strict=True)}) == len(rows)  # no repeats per instance
    again = task.sft_dataset(limit=30, per_instance=3, sample_seed=2)
    assert again["completion"] != rows["completion"]  # the draw follows sample_seed
    with pytest.raises(ValueError, match="per_instance must be >= 1"):
        task.sft_dataset(per_instance=0)


def test_chat_rows_are_assistant_replies() -> None:
    task = make_task("boolean", operators="basic", max_depth=1)
    row = task.sft_dataset(style="chat", per_instance=1)[0]
    assert row["completion"][0]["role"] == "assistant"
    assert task.parse(row["completion"][0]["content"]) is not None


def test_divrl_sft_trains_the_adapter_and_writes_the_merged_model(tiny_qwen3: Path, tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from divrl.cli import main

    out = tmp_path / "sft"
    code = main(["sft", str(RECIPES / "hypospace-voxel.yaml"), "--model_name_or_path", str(tiny_qwen3),
                 "--max_steps", "2", "--learning_rate", "0.05", "--output_dir", str(out), "--instance_limit", "20"])
    assert code == 0
    assert (out / "adapter_config.json").is_file() and (out / "trainer_state.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(out / "merged")
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_qwen3), str(out))
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    ids = torch.arange(3, 20).unsqueeze(0)
    with torch.no_grad():
        merged_logits, adapted_logits = merged(ids).logits, adapted(ids).logits
        assert not torch.allclose(merged_logits, base(ids).logits, atol=1e-4)  # training changed the model
    torch.testing.assert_close(merged_logits, adapted_logits, atol=1e-4, rtol=1e-4)


def test_bad_sft_settings_name_the_field(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.sft import main

    recipe = str(RECIPES / "hypospace-voxel.yaml")
    with pytest.raises(ValueError, match="has none"):
        countdown = tmp_path / "countdown.yaml"  # a task without warm-start data
        countdown.write_text(f"task: countdown\nuse_peft: true\nuse_cpu: true\nbf16: false\n"
                             f"model_name_or_path: {tiny_qwen3}\n")
        main(["--config", str(countdown), "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="hypotheses_per_instance must be >= 1"):
        main(["--config", recipe, "--hypotheses_per_instance", "0", "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="use_peft"):
        main(["--config", recipe, "--use_peft", "false", "--model_name_or_path", str(tiny_qwen3),
              "--output_dir", str(tmp_path)])


def test_molecule_sft_rows_continue_the_prompt_with_a_molecule_no_prompt_shows() -> None:
    from divrl.tasks.molecules.chem import answer_smiles
    from divrl.tasks.molecules.data import few_shot_pool
    from divrl.tasks.molecules.task import MoleculeTask

    task = MoleculeTask()
    rows = task.sft_dataset(seed=3, limit=40, sample_seed=1)
    assert len(rows) == 40 and set(rows.column_names) == {"prompt", "completion"}
    examples = set(few_shot_pool())
    targets = [answer_smiles(row["completion"], row["prompt"]) for row in rows]
    assert all(row["completion"].startswith(" ") and row["completion"].endswith("\n") for row in rows)
    assert all(t is not None and t not in examples for t in targets)  # never a few-shot example of any prompt
    task.scorer.score(targets)
    assert not set(targets) & set(task.scorer.rejected)  # every target passes the chemistry sanity gate
    assert len(set(targets)) == 40
    redrawn = task.sft_dataset(seed=3, limit=40, sample_seed=2)
    assert [r["completion"] for r in redrawn] != [r["completion"] for r in rows]
    chat = task.sft_dataset(style="chat", limit=2)
    assert chat[0]["completion"][0]["role"] == "assistant"


def test_divrl_sft_trains_a_molecule_warm_start(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.cli import main

    out = tmp_path / "sft"
    code = main(["sft", str(RECIPES / "molecules.yaml"), "--model_name_or_path", str(tiny_qwen3), "--max_steps", "1",
                 "--output_dir", str(out), "--instance_limit", "8", "--merge", "false"])
    assert code == 0 and (out / "adapter_config.json").is_file()
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 1


def test_cpu_sft_projects_only_the_labelled_positions_with_the_same_loss(tiny_qwen3: Path, tmp_path: Path) -> None:
    # TRL scores every position off Triton; divrl's SFT lets the CPU score the completion positions only.
    from unittest.mock import patch

    import trl.trainer.utils as trl_utils

    from divrl.sft import build_trainer, labelled_positions_only, parse_recipe

    recipe = str(RECIPES / "hypospace-voxel.yaml")
    script, sft_args, model_args = parse_recipe(["--config", recipe, "--model_name_or_path", str(tiny_qwen3),
                                                 "--output_dir", str(tmp_path), "--instance_limit", "20",
                                                 "--per_device_train_batch_size", "4"])
    trainer = build_trainer(script, sft_args, model_args)
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    rows: list[int] = []
    original = trl_utils._ChunkedLogProbFunction.apply

    def spy(hidden, *args):
        rows.append(hidden.shape[0])
        return original(hidden, *args)

    with patch.object(trl_utils._ChunkedLogProbFunction, "apply", spy):
        everything = trainer.compute_loss(trainer.model, dict(batch))
        with labelled_positions_only():
            compact = trainer.compute_loss(trainer.model, dict(batch))
    assert rows == [batch["labels"][:, 1:].numel(), labelled] and labelled < rows[0] / 2
    torch.testing.assert_close(compact, everything)


def test_divrl_sft_resumes_from_a_checkpoint(tiny_qwen3: Path, tmp_path: Path) -> None:
    """The evidence benchmark's warm start checkpoints and resumes an interrupted `divrl sft`."""
    from divrl.cli import main

    out = tmp_path / "sft"
    args = ["sft", str(RECIPES / "hypospace-voxel.yaml"), "--model_name_or_path", str(tiny_qwen3), "--max_steps", "1",
            "--save_strategy", "steps", "--save_steps", "1", "--output_dir", str(out), "--instance_limit", "20"]
    first = out / "checkpoint-1" / "trainer_state.json"
    assert main(args) == 0 and first.is_file()
    written = first.stat().st_mtime_ns
    resumed = [*args, "--resume_from_checkpoint", str(out / "checkpoint-1")]
    resumed[resumed.index("--max_steps") + 1] = "3"
    assert main(resumed) == 0
    assert (out / "checkpoint-3").is_dir() and (out / "merged" / "config.json").is_file()
    assert first.stat().st_mtime_ns == written  # step 1 was not trained (and saved) again: the run resumed


def test_every_sft_save_has_divrls_card_and_a_portable_base(tiny_qwen3: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm start's adapter and checkpoints carry divrl's card, not PEFT's template, and record the embedded base
    by its portable name, from which the merged model is rebuilt (as RL's saves do)."""
    import shutil

    from divrl.cli import main
    from divrl.models import READY_MARKER
    from divrl.trainers.model_card import portable_args

    monkeypatch.setenv("DIVRL_CACHE", str(tmp_path / "cache"))  # the tiny model stands in for a prepared one
    base = tmp_path / "cache" / "models" / "gemma-3-270m"
    shutil.copytree(tiny_qwen3, base)
    (base / READY_MARKER).write_text(json.dumps({"name": "gemma-3-270m"}))
    out = tmp_path / "sft"
    assert main(["sft", str(RECIPES / "hypospace-voxel.yaml"), "--model_name_or_path", "embedded:gemma-3-270m",
                 "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1", "--logging_steps", "1",
                 "--output_dir", str(out), "--instance_limit", "20"]) == 0
    for folder in (out / "checkpoint-1", out / "checkpoint-2", out):
        card = (folder / "README.md").read_text()
        assert "Model Card for Model ID" not in card and "More Information Needed" not in card
        assert "| methods | SFT |" in card and "`divrl sft` (TRL's `SFTTrainer`, LoRA)" in card and "- divrl\n" in card
        assert "| base model | `embedded:gemma-3-270m` |" in card and "| task | hypospace-voxel" in card
        recipe = portable_args([str(RECIPES / "hypospace-voxel.yaml")])[0]  # relative to the working folder
        assert f"`divrl sft {recipe} --model_name_or_path embedded:gemma-3-270m" in card
        assert "DeepSeekMath" not in card and "## Metrics at save (last logged training step, step" in card
        assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == \
            "embedded:gemma-3-270m"
    assert "step 1 of 2" in (out / "checkpoint-1" / "README.md").read_text()
    assert (out / "merged" / "config.json").is_file()


def test_divrl_sft_logs_a_held_out_recovery_curve_without_changing_what_it_trains(tiny_qwen3: Path,
                                                                                  tmp_path: Path) -> None:
    """recovery_eval on `divrl sft`: the held-out curve at step 0, every eval_steps and the end, sampled from its own
    random stream, so the adapter is the one a run without it trains."""
    from safetensors.torch import load_file

    from divrl.cli import main
    from divrl.tasks.hypospace.recovery_callback import EVAL_PREFIX

    args = ["sft", str(RECIPES / "hypospace-voxel.yaml"), "--model_name_or_path", str(tiny_qwen3), "--max_steps", "2",
            "--learning_rate", "0.05", "--instance_limit", "20", "--merge", "false", "--logging_steps", "1"]
    curve = ["--recovery_eval", "true", "--recovery_eval_instances", "2", "--recovery_eval_samples", "2",
             "--recovery_eval_max_new_tokens", "4", "--eval_steps", "1"]
    assert main([*args, "--output_dir", str(tmp_path / "plain")]) == 0
    assert main([*args, *curve, "--output_dir", str(tmp_path / "curve")]) == 0
    history = json.loads((tmp_path / "curve" / "trainer_state.json").read_text())["log_history"]
    evals = [e for e in history if f"{EVAL_PREFIX}validity" in e]
    assert [e["step"] for e in evals] == [0, 1, 2]
    assert all(0 <= e[f"{EVAL_PREFIX}validity"] <= 1 and f"{EVAL_PREFIX}recovery@2" in e for e in evals)
    assert any("loss" in e for e in history)  # the training log is kept beside the evaluations
    plain, curved = (load_file(tmp_path / run / "adapter_model.safetensors") for run in ("plain", "curve"))
    assert plain.keys() == curved.keys()
    assert all(torch.equal(plain[name], curved[name]) for name in plain)


def test_sft_recovery_eval_without_a_token_limit_names_the_field(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.sft import main

    recipe = tmp_path / "sft.yaml"  # SFTConfig has no max_completion_length to fall back on
    recipe.write_text("".join(line for line in (RECIPES / "hypospace-voxel.yaml").read_text().splitlines(True)
                              if not line.startswith("recovery_eval_max_new_tokens:")))
    with pytest.raises(ValueError, match="recovery_eval_max_new_tokens"):
        main(["--config", str(recipe), "--model_name_or_path", str(tiny_qwen3), "--instance_limit", "20",
              "--recovery_eval", "true", "--output_dir", str(tmp_path / "out")])
