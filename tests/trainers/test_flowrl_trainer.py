"""FlowRL trainer: the loss against a hand computation on scripted completions, the log Z head training and
round-tripping through a checkpoint, LoRA training steps, and misconfiguration named at construction."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import (
    completion_logps,
    distinct_chars_reward,
    logged,
    lora_config,
    make_config,
    metric_keys,
    prompt_dataset,
    randomize_lora,
    snapshot,
    text_of,
)

REWARDS = {"ab": 1.0, "b": 0.0, "abc d": 3.0, "xyz": 2.0, "aa": 0.5, "hello": 4.0, "q": 0.0, "zz top": 1.0}
COMPLETIONS = list(REWARDS)  # global row i of a step gets COMPLETIONS[i]; rows 0-3 and 4-7 are the two groups
GROUP = 4
METRICS = {"flowrl/log_z", "flowrl/residual", "flowrl/importance_weight", "flowrl/loss"}


def _tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def table_reward(completions: list, **_: Any) -> list[float]:
    return [REWARDS[text_of(c)] for c in completions]


def _hand_advantages() -> dict[str, float]:
    """Group-normalised rewards (r - group mean) / (unbiased group std + 1e-4), as TRL's scale_rewards='group'."""
    advantages = {}
    for start in range(0, len(COMPLETIONS), GROUP):
        texts = COMPLETIONS[start : start + GROUP]
        rewards = [REWARDS[t] for t in texts]
        mean = sum(rewards) / GROUP
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (GROUP - 1))
        advantages.update({t: (REWARDS[t] - mean) / (std + 1e-4) for t in texts})
    return advantages


def _hand_terms(trainer, batch: dict[str, torch.Tensor], beta: float) -> dict[str, torch.Tensor]:
    """log Z, residual and lengths of a micro-batch from plain forwards of the policy (adapter on) and reference
    (adapter off), independent of TRL's fused kernel and of the trainer's capture hook."""
    tokenizer = trainer.processing_class
    model = trainer.model
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    mask = batch["completion_mask"].float()
    width = batch["completion_ids"].shape[1]
    model.eval()
    with torch.no_grad():
        policy = (completion_logps(model, input_ids, attention_mask, width) * mask).sum(1)
        with model.disable_adapter():
            reference = (completion_logps(model, input_ids, attention_mask, width) * mask).sum(1)
        hidden = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True).hidden_states[-1]
        prompt_mask = batch["prompt_mask"].unsqueeze(-1).float()
        pooled = (hidden[:, : prompt_mask.shape[1]] * prompt_mask).sum(1) / prompt_mask.sum(1)
        log_z = trainer.log_z_head.eval()(pooled)
    texts = [tokenizer.decode(ids[m.bool()], skip_special_tokens=True)
             for ids, m in zip(batch["completion_ids"], batch["completion_mask"], strict=True)]
    advantages = _hand_advantages()
    rewards = torch.tensor([advantages[t] for t in texts])
    lengths = mask.sum(1)
    residual = log_z + policy / lengths - beta * rewards - reference / lengths
    return {"log_z": log_z, "residual": residual, "policy": policy, "reference": reference, "lengths": lengths}


def test_loss_matches_hand_computation(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl import FlowRLTrainer
    from divrl.testing import scripted_generation

    beta, clip, kl_coef, entropy_coef = 0.5, 0.2, 0.04, 0.01
    tokenizer = _tokenizer(tiny_qwen3)
    # Two micro-batches of 4 per optimizer step; learning rate 0 keeps policy and head as they were for the step.
    # TRL's KL and entropy regularisation stay on top of FlowRL (the IPS paper runs FlowRL with both); "bnpo" makes
    # their loss contribution the mean of the logged per-micro-batch values.
    args = make_config(tmp_path, max_steps=1, gradient_accumulation_steps=2, learning_rate=0.0, flowrl_beta=beta,
                       flowrl_importance_clip=clip, flowrl_log_z_dropout=0.0, beta=kl_coef,
                       entropy_coef=entropy_coef, loss_type="bnpo")
    trainer = FlowRLTrainer(str(tiny_qwen3), table_reward, args=args, train_dataset=prompt_dataset(),
                            processing_class=tokenizer, peft_config=lora_config())
    randomize_lora(trainer.model)  # policy != reference, so a swapped or missing reference term shows
    with scripted_generation(tokenizer, lambda prompt, row: COMPLETIONS[row]):
        trainer.train()

    batches = trainer._buffered_inputs
    assert [len(b["completion_ids"]) for b in batches] == [4, 4]
    terms = [_hand_terms(trainer, batch, beta) for batch in batches]
    residual = torch.cat([t["residual"] for t in terms])
    log_z = torch.cat([t["log_z"] for t in terms])
    assert residual.abs().min() > 0.1 and log_z.abs().min() > 0  # no term vanishes by accident
    history = trainer.state.log_history
    # On-policy step (TRL skips pi_old): w = 1; FlowRL's part is the mean over all 8 sequences, so each
    # micro-batch was divided by the 2 accumulation steps.
    flowrl_loss = residual.square().mean().item()
    assert logged(history, "flowrl/loss") == pytest.approx([flowrl_loss], rel=1e-5)
    (kl,), (entropy,) = logged(history, "kl"), logged(history, "entropy")
    assert kl > 0  # the adapter moved the policy away from the reference
    expected_loss = flowrl_loss + kl_coef * kl - entropy_coef * entropy
    assert logged(history, "loss") == pytest.approx([expected_loss], rel=1e-5)
    assert logged(history, "flowrl/importance_weight") == [1.0]
    assert logged(history, "flowrl/log_z") == pytest.approx([log_z.mean().item()], rel=1e-5, abs=1e-6)
    assert logged(history, "flowrl/residual") == pytest.approx([residual.abs().mean().item()], rel=1e-5)

    # Off-policy: pi_old from TRL's `old_per_token_logps` gives w = clip(pi / pi_old); shifts of the sequence
    # log-ratio by +0.1, -1, +1 give unclipped, 1 - clip and 1 + clip. The last completion is masked out entirely
    # (as by mask_truncated_completions) and takes no part.
    batch, hand = dict(batches[0]), terms[0]
    log_ratio = torch.tensor([0.1, -1.0, 1.0, 0.0])
    old = torch.zeros_like(batch["completion_ids"], dtype=torch.float32)
    old[:, 0] = hand["policy"] - log_ratio  # the whole sequence log-prob on the first token: only sums matter
    batch["old_per_token_logps"] = old
    batch["completion_mask"] = batch["completion_mask"].clone()
    batch["completion_mask"][3] = 0
    weight = torch.exp(log_ratio[:3]).clamp(1 - clip, 1 + clip)
    trainer.model.train()
    loss = trainer.compute_loss(trainer.model, batch)
    metrics = trainer._metrics["train"]
    flowrl_loss = (weight * hand["residual"][:3].square()).mean()
    assert metrics["flowrl/loss"][-1] == pytest.approx(flowrl_loss.item(), rel=1e-4)
    assert metrics["flowrl/importance_weight"][-1] == pytest.approx(weight.mean().item(), rel=1e-4)
    kl, entropy = metrics["kl"][-1], metrics["entropy"][-1]  # TRL's terms of this micro-batch
    expected_loss = (flowrl_loss + kl_coef * kl - entropy_coef * entropy) / 2  # still 2 accumulation steps
    assert loss.item() == pytest.approx(expected_loss.item(), rel=1e-4)


def _checkpointed_trainer(model: Path, out: Path):
    """FlowRLTrainer for 2 LoRA steps with a checkpoint after each."""
    from divrl import FlowRLTrainer

    args = make_config(out, max_steps=2, save_strategy="steps", save_steps=1, learning_rate=0.01)
    return FlowRLTrainer(str(model), table_reward, args=args, train_dataset=prompt_dataset(conversational=True),
                         processing_class=_tokenizer(model), peft_config=lora_config())


def _train_scripted(trainer, resume: str | None = None):
    """Train on scripted completions (a different rotation of the table each step), so runs are repeatable."""
    from divrl.testing import scripted_generation

    shift = {0: 0, 1: 2}

    def script(prompt: str, row: int) -> str:
        return COMPLETIONS[(row + shift[trainer.state.global_step]) % len(COMPLETIONS)]

    with scripted_generation(trainer.processing_class, script):
        trainer.train(resume_from_checkpoint=resume)
    return trainer


@pytest.fixture(scope="module")
def full_run(tiny_qwen3: Path, tmp_path_factory: pytest.TempPathFactory):
    """An uninterrupted 2-step run, snapshots of its initial model and head, and its output directory."""
    out = tmp_path_factory.mktemp("flowrl_full")
    trainer = _checkpointed_trainer(tiny_qwen3, out)
    initial = {"model": snapshot(trainer.model), "head": snapshot(trainer.log_z_head)}
    return _train_scripted(trainer), initial, out


@pytest.mark.slow
def test_lora_training_changes_adapter_and_log_z_head(full_run) -> None:
    trainer, initial, _ = full_run
    after = snapshot(trainer.model)
    base = [n for n in after if "lora_" not in n]
    lora_b = [n for n in after if "lora_B" in n]
    assert base and lora_b
    assert all(initial["model"][n].equal(after[n]) for n in base), "base weights must stay frozen"
    assert all(not initial["model"][n].equal(after[n]) for n in lora_b), "every lora_B must train"
    head = snapshot(trainer.log_z_head)
    assert all(not initial["head"][n].equal(head[n]) for n in head), "every log Z head parameter must train"
    assert trainer.state.global_step == 2
    assert not METRICS - metric_keys(trainer.state.log_history)


@pytest.mark.slow
def test_resume_restores_log_z_head(full_run, tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.trainers.checkpoint import STATE_FILE, atomic_save

    full, initial, out = full_run
    checkpoint = out / "checkpoint-1"
    saved = torch.load(checkpoint / STATE_FILE, weights_only=True)["objective"]
    assert any(not initial["head"][n].equal(saved[n]) for n in saved), "the head had trained by the checkpoint"

    resumed = _train_scripted(_checkpointed_trainer(tiny_qwen3, tmp_path / "resumed"), resume=str(checkpoint))
    assert resumed.state.global_step == 2
    final = snapshot(full.log_z_head)
    for name, param in snapshot(resumed.log_z_head).items():
        torch.testing.assert_close(param, final[name])  # same weights, Adam moments and step 2 as the full run
    # The history of step 1 comes from the checkpoint; step 2 is recomputed and matches the full run.
    assert logged(resumed.state.log_history, "flowrl/loss") == pytest.approx(logged(full.state.log_history,
                                                                                     "flowrl/loss"))

    foreign = tmp_path / "foreign"
    shutil.copytree(checkpoint, foreign)
    state = torch.load(foreign / STATE_FILE, weights_only=True)
    atomic_save({**state, "objective": None}, str(foreign / STATE_FILE))  # as a run without FlowRL writes it
    (foreign / "divrl_manifest.json").unlink()  # its sizes no longer match
    with pytest.raises(ValueError, match=r"has no objective state; it was not written by an objective \(flowrl\) run"):
        _train_scripted(_checkpointed_trainer(tiny_qwen3, tmp_path / "again"), resume=str(foreign))


@pytest.mark.parametrize("checkpointing", [True, False])
def test_gemma3_lora_steps(checkpointing: bool, tiny_gemma3: Path, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    # Without activation checkpointing the CPU loss forward computes each shared prompt once per group (a hook on
    # the backbone that read log Z's prompt states from that forward once crashed on its split passes, and its
    # fix by a full forward made FlowRL's steps ~5x slower): FlowRL must keep that path.
    from divrl import DivRLTrainer
    from divrl.backends import cpu as cpu_fast

    shared = []
    share = cpu_fast.shared_prompt_hidden_states
    def recorded(*args):  # the loss forward is the one with gradients (the reference's runs without)
        hidden = share(*args)
        if torch.is_grad_enabled():
            shared.append(hidden)
        return hidden

    monkeypatch.setattr(cpu_fast, "shared_prompt_hidden_states", recorded)
    args = make_config(tmp_path, flowrl=True, ips=True, activation_checkpointing=checkpointing)
    trainer = DivRLTrainer(str(tiny_gemma3), distinct_chars_reward, args=args,
                           train_dataset=prompt_dataset(conversational=True),
                           processing_class=_tokenizer(tiny_gemma3), peft_config=lora_config())
    head = snapshot(trainer.log_z_head)
    trainer.train()
    assert trainer.state.global_step == 2
    assert not (METRICS | {"ips/max_scale"}) - metric_keys(trainer.state.log_history)
    assert any(not head[n].equal(p) for n, p in snapshot(trainer.log_z_head).items())
    assert any(hidden is not None for hidden in shared) == (not checkpointing)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"flowrl_beta": 0.0}, "flowrl_beta"),
        ({"flowrl_importance_clip": 1.0}, "flowrl_importance_clip"),
        ({"flowrl_importance_clip": -0.1}, "flowrl_importance_clip"),
        ({"flowrl_log_z_layers": 0}, "flowrl_log_z_layers"),
        ({"flowrl_log_z_width": 0}, "flowrl_log_z_width"),
        ({"flowrl_log_z_dropout": 1.0}, "flowrl_log_z_dropout"),
        ({"flowrl_log_z_lr": -1e-3}, "flowrl_log_z_lr"),
        ({"flowrl": True, "use_vllm": True, "vllm_importance_sampling_mode": "token_truncate"},
         "vllm_importance_sampling_mode"),
        ({"flowrl": True, "scale_rewards": "batch"}, "flowrl"),
        ({"flowrl": True, "scale_rewards": "none"}, "flowrl"),
        ({"flowrl": True, "multi_objective_aggregation": "normalize_then_sum"}, "flowrl"),
    ],
)
def test_bad_config_names_the_field(overrides: dict[str, Any], field: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=rf"DivRLConfig\.{field}\b"):
        make_config(tmp_path, **overrides)


def test_ready_made_optimizer_is_refused(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from divrl import FlowRLTrainer

    model = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"DivRLConfig\.flowrl\b.*optimizer_cls_and_kwargs"):
        FlowRLTrainer(model, table_reward, args=make_config(tmp_path), train_dataset=prompt_dataset(),
                      processing_class=_tokenizer(tiny_qwen3), optimizers=(optimizer, None))


def test_without_peft_the_reference_is_a_frozen_copy(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl import FlowRLTrainer

    trainer = FlowRLTrainer(str(tiny_qwen3), table_reward, args=make_config(tmp_path), train_dataset=prompt_dataset(),
                            processing_class=_tokenizer(tiny_qwen3))
    assert trainer.ref_model is not None and trainer.ref_model is not trainer.model
    policy = dict(trainer.model.named_parameters())
    assert all(p.equal(policy[n]) for n, p in trainer.ref_model.named_parameters())  # the initial policy


@pytest.mark.slow
def test_two_processes_train_the_same_log_z_head_as_one(tiny_qwen3: Path, tmp_path: Path) -> None:
    """The head is outside DDP: its gradients are averaged by hand, so 2 processes of 4 rows = 1 process of 8."""
    from flowrl_distributed_script import main

    main(str(tiny_qwen3), str(tmp_path / "one"))  # this process is the single-process run
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
               str(root / "accelerate_configs" / "cpu_2proc.yaml"),
               str(root / "tests" / "helpers" / "flowrl_distributed_script.py"), str(tiny_qwen3), str(tmp_path / "two")]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    single = torch.load(tmp_path / "one" / "rank0.pt", weights_only=True)
    ranks = [torch.load(tmp_path / "two" / f"rank{i}.pt", weights_only=True) for i in range(2)]
    assert single["processes"] == 1 and [r["processes"] for r in ranks] == [2, 2]
    for part in ("head", "lora"):
        for name, value in single[part].items():
            assert ranks[0][part][name].equal(ranks[1][part][name]), f"{part} {name} differs between processes"
            torch.testing.assert_close(ranks[0][part][name], value, rtol=1e-4, atol=1e-5)
