"""Stop a run, resume it from its checkpoint: the method state (archive, novelty memory, alpha) is identical."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from trainer_helpers import ToyTask, lora_config, make_config, prompt_dataset

STEPS = [["abc e", "bcd", "xyz", "aeiou"], ["abc", "qqq", "hello", "xy o"], ["zzz", "ba", "oa e", "mnop"]]


DUAL = {"maxent_entropy_target": 10.0, "maxent_alpha_lr": 0.05}


def _run(model: Path, out: Path, resume: str | None = None, entropy: dict = DUAL):
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(model)
    args = make_config(out, max_steps=3, save_strategy="steps", save_steps=2, ips=True, qd=True, qd_dims=[3, 3],
                       novelty_coef=0.3, count_bonus_coef=0.5, ips_outcome_key="semantic", learning_rate=0.01,
                       **entropy)
    trainer = DivRLTrainer(str(model), args=args, train_dataset=prompt_dataset(), processing_class=tokenizer,
                           peft_config=lora_config(), task=ToyTask())
    with scripted_generation(tokenizer, lambda prompt, row: STEPS[trainer.state.global_step][row]):
        trainer.train(resume_from_checkpoint=resume)
    return trainer


def _assert_same_state(a: dict, b: dict) -> None:
    assert a["diversity"]["archives"] == b["diversity"]["archives"]
    assert a["diversity"]["entropy"] == b["diversity"]["entropy"]
    assert a["diversity"]["counts"] == b["diversity"]["counts"]
    assert torch.equal(a["diversity"]["clusters"]["leaders"], b["diversity"]["clusters"]["leaders"])
    assert torch.equal(a["diversity"]["novelty"]["memory"], b["diversity"]["novelty"]["memory"])


def test_resume_restores_method_state(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.trainers.checkpoint import STATE_FILE

    full = _run(tiny_qwen3, tmp_path / "full")
    checkpoint = tmp_path / "full" / "checkpoint-2"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=True)
    assert saved["diversity"]["archives"][""]["elites"], "the archive learned something before the checkpoint"
    assert saved["diversity"]["entropy"]["alpha"] > 0
    assert len(saved["diversity"]["novelty"]["memory"]) == 8  # two steps of 4 completions
    assert sum(count for _, _, count in saved["diversity"]["counts"]["counts"]) == 8  # every completion is valid
    assert len(saved["diversity"]["clusters"]["leaders"]) >= 2  # the semantic classes of the first two steps

    resumed = _run(tiny_qwen3, tmp_path / "resumed", resume=str(checkpoint))
    assert resumed.state.global_step == 3
    _assert_same_state(full.method_state_dict(), resumed.method_state_dict())
    assert len(full.method_state_dict()["diversity"]["novelty"]["memory"]) == 12
    weights = {n: p for n, p in full.model.named_parameters() if "lora_" in n}
    for name, param in resumed.model.named_parameters():
        if "lora_" in name:
            torch.testing.assert_close(param, weights[name])

    foreign = tmp_path / "foreign"
    shutil.copytree(checkpoint, foreign)
    (foreign / STATE_FILE).unlink()  # e.g. a checkpoint of a plain GRPOTrainer: refuse rather than lose state
    (foreign / "divrl_manifest.json").unlink()  # written by divrl trainers only
    with pytest.raises(ValueError, match=f"has no {STATE_FILE}"):
        _run(tiny_qwen3, tmp_path / "again", resume=str(foreign))



MOLECULES = [" CC(=O)Oc1ccccc1C(=O)O", " Cn1c(=O)c2c(ncn2C)n(C)c1=O", " CC(=O)Nc1ccc(O)cc1", " not a molecule"]


def test_resume_restores_trls_entropy_controller_for_auto(tiny_qwen3: Path, tmp_path: Path) -> None:
    # 'auto' x 2: the target is measured at step 1, TRL's controller raises entropy_coef at steps 2 and 3. The
    # resumed run never measures: it gets the target and TRL's state (coefficient, last entropy) from divrl_state.pt.
    from divrl.trainers.checkpoint import STATE_FILE

    auto = {"maxent_entropy_target": "auto", "maxent_entropy_auto_scale": 2.0, "entropy_coef_delta": 0.1}
    full = _run(tiny_qwen3, tmp_path / "full", entropy=auto)
    checkpoint = tmp_path / "full" / "checkpoint-2"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=True)["diversity"]["entropy"]
    assert saved["controller"] == "trl" and saved["target"] > 0 and saved["entropy_coef"] == pytest.approx(0.1)
    assert (checkpoint / "entropy_ctrl_state.json").exists()  # TRL saves its own copy too (not read on resume)

    resumed = _run(tiny_qwen3, tmp_path / "resumed", resume=str(checkpoint), entropy=auto)
    _assert_same_state(full.method_state_dict(), resumed.method_state_dict())
    assert resumed.entropy_coef == full.entropy_coef == pytest.approx(0.2)
    assert resumed._last_world_entropy == full._last_world_entropy
    assert resumed.diversity_state["maxent_entropy"].controller.target == saved["target"]  # restored, not measured


def test_auto_refuses_a_dual_descent_state_and_back() -> None:
    from divrl.methods import method_args
    from divrl.methods.maxent_entropy import MaxEntEntropy

    auto = MaxEntEntropy(method_args(maxent_entropy_target="auto"), None)
    dual = MaxEntEntropy(method_args(maxent_entropy_target=0.5), None)
    before = {"target": 0.25, "lr": 0.01, "max_alpha": None, "alpha": 0.1,  # an 'auto' run before the switch
              "auto": {"scale": 1.0, "steps": 1, "entropy_sum": 0.25, "measured": 1}}
    with pytest.raises(ValueError, match="resume with maxent_entropy_target=0.25 to continue it with dual descent"):
        auto.load_state_dict(before)
    dual.load_state_dict(before)  # ... which a numeric target continues
    with pytest.raises(ValueError, match="resume with maxent_entropy_target: auto"):
        dual.load_state_dict(auto.state_dict())


def _molecule_run(model: Path, out: Path, max_steps: int, resume: str | None = None):
    from transformers import AutoTokenizer

    from divrl import DivRLTrainer
    from divrl.tasks.molecules import DiversityFilter, MoleculeTask, build_dataset
    from divrl.testing import scripted_generation

    tokenizer = AutoTokenizer.from_pretrained(model)
    task = MoleculeTask(diversity_filter=DiversityFilter(bucket_size=10, min_score=0.0))
    args = make_config(out, max_steps=max_steps, save_strategy="steps", save_steps=2, ips=True,
                       ips_outcome_key="task", max_completion_length=48)
    trainer = DivRLTrainer(str(model), args=args, train_dataset=build_dataset(4, style="base", n_shots=2),
                           processing_class=tokenizer, peft_config=lora_config(), task=task)
    with scripted_generation(tokenizer, lambda prompt, row: MOLECULES[row % 4]):
        trainer.train(resume_from_checkpoint=resume)
    return trainer, task


def test_resume_restores_the_task_state(tiny_qwen3: Path, tmp_path: Path) -> None:
    """The molecule task's reward cache, oracle-call history and diversity filter survive a resume."""
    from divrl.trainers.checkpoint import STATE_FILE

    _, first = _molecule_run(tiny_qwen3, tmp_path / "full", max_steps=2)
    checkpoint = tmp_path / "full" / "checkpoint-2"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=True)["task"]
    assert saved == [first.state_dict()]  # one process
    assert first.scorer.misses == 3 and first.diversity_filter.memory

    _, resumed = _molecule_run(tiny_qwen3, tmp_path / "resumed", max_steps=3, resume=str(checkpoint))
    # Step 3 scores the same molecules again: all served from the restored cache, filter memory carried over.
    assert resumed.scorer.misses == 3
    assert [c.smiles for c in resumed.scorer.history] == [c.smiles for c in first.scorer.history]
    assert resumed.scorer.hits == first.scorer.hits + 3
    assert resumed.diversity_filter.memory == first.diversity_filter.memory


# The names the trainer carried before issue 59 moved its checkpoint and resume policy into CheckpointPolicy.
_FORMER_TRAINER_POLICY = {"RunFinished", "resume_target", "required_checkpoint_files", "checkpoint_state",
                          "keeps_method_state", "needs_state_file", "_stateful_methods", "_task_states",
                          "_task_journal", "_refuse_newly_enabled", "_saved_part", "_load_task_state"}


def _trainer_policy_leaks(trainer_source: str, checkpoint_source: str) -> list[str]:
    """What of the checkpoint policy a trainer module's source holds: a function or class named like one of
    CheckpointPolicy's (or the trainer's former policy names), anything but `CheckpointPolicy` imported from
    divrl.trainers.checkpoint (its files, scans and saves), or a `torch.load`."""
    import ast

    policy = next(node for node in ast.walk(ast.parse(checkpoint_source))
                  if isinstance(node, ast.ClassDef) and node.name == "CheckpointPolicy")
    policy_names = {node.name for node in policy.body if isinstance(node, ast.FunctionDef)
                    and not node.name.startswith("__")} | _FORMER_TRAINER_POLICY
    leaks = []
    for node in ast.walk(ast.parse(trainer_source)):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in policy_names:
            leaks.append(f"defines {node.name} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module == "divrl.trainers.checkpoint":
            leaks += [f"imports {alias.name}" for alias in node.names if alias.name != "CheckpointPolicy"]
        elif isinstance(node, ast.Attribute) and node.attr == "load" and getattr(node.value, "id", None) == "torch":
            leaks.append(f"calls torch.load (line {node.lineno})")
    return leaks


def test_the_trainer_holds_no_checkpoint_policy() -> None:
    """Issue 59: the checkpoint and resume policy lives in `divrl.trainers.checkpoint.CheckpointPolicy`; the trainer's
    TRL hooks only delegate to it (`trainer.checkpoints`)."""
    import inspect

    import divrl.trainers.checkpoint as checkpoint
    import divrl.trainers.divrl_trainer as divrl_trainer

    checkpoint_source = inspect.getsource(checkpoint)
    assert _trainer_policy_leaks(inspect.getsource(divrl_trainer), checkpoint_source) == []
    # the check sees a policy method put back on the trainer
    leaked = "class T:\n    def resume_target(self):\n        pass\n    def restore(self, c):\n        torch.load(c)\n"
    assert _trainer_policy_leaks(leaked, checkpoint_source) == [
        "defines resume_target (line 2)", "defines restore (line 4)", "calls torch.load (line 5)"]
