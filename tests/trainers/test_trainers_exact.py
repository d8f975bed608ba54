"""Exact checks with scripted completions: the rewards, bonuses, bins and divergences are known in advance."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import (
    base_settings,
    completion_logps,
    logged,
    lora_config,
    make_config,
    prompt_dataset,
    randomize_lora,
)


def _tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _reward_table(table: dict[str, float]):
    def table_reward(completions: list[str], **_: Any) -> list[float]:
        return [table[c] for c in completions]

    return table_reward


class _RecordRewards:
    """TrainerCallback recording, at each step end, the logged reward columns and advantages of that step."""

    def __init__(self) -> None:
        from transformers import TrainerCallback

        self.steps: list[dict[str, list[float]]] = []
        outer = self

        class Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                logs = outer.trainer._logs
                outer.steps.append({**{k: list(v) for k, v in logs["rewards"].items()},
                                    "advantages": list(logs["advantages"])})

        self.callback = Callback()
        self.trainer = None


def _train_scripted(model_path: Path, tmp_path: Path, steps: list[list[str]], reward, task=None, **overrides):
    """Train len(steps) steps where step s generates completions steps[s] (by global row); return trainer, log."""
    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = _tokenizer(model_path)
    recorder = _RecordRewards()
    settings = dict(max_steps=len(steps), per_device_train_batch_size=len(steps[0]))
    settings.update(overrides)
    trainer = DivRLTrainer(str(model_path), reward, args=make_config(tmp_path, **settings),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config(),
                           task=task, callbacks=[recorder.callback])
    recorder.trainer = trainer
    with scripted_generation(tokenizer, lambda prompt, row: steps[trainer.state.global_step][row]):
        trainer.train()
    return trainer, recorder.steps


def test_ips_scales_rewards_by_inverse_group_frequency(tiny_qwen3: Path, tmp_path: Path) -> None:
    completions = ["aa", "aa", "bb", "cc", "dd", "dd", "dd", "dd"]
    reward = _reward_table({"aa": 1.0, "bb": 2.0, "cc": 3.0, "dd": 1.0})
    trainer, steps = _train_scripted(tiny_qwen3, tmp_path, [completions], reward, ips=True, ips_outcome_key="text")
    # group 1: aa has p = 1/2, bb and cc 1/4; group 2: one outcome, p = 1 (unchanged)
    assert steps[0]["table_reward"] == pytest.approx([2.0, 2.0, 8.0, 12.0, 1.0, 1.0, 1.0, 1.0])
    std = math.sqrt(((2 - 6) ** 2 * 2 + (8 - 6) ** 2 + (12 - 6) ** 2) / 3)
    expected = [(r - 6) / (std + 1e-4) for r in (2, 2, 8, 12)] + [0.0] * 4
    assert steps[0]["advantages"] == pytest.approx(expected, abs=1e-5)
    history = trainer.state.log_history
    assert logged(history, "ips/distinct_outcomes") == [2.0]  # (3 + 1) / 2 groups
    assert logged(history, "ips/max_scale") == [4.0]
    assert logged(history, "divrl/task_reward") == pytest.approx([11 / 8])


class _CellTask:
    """Descriptor = the completion's digit / 10 (1-D); reward by its first letter."""

    name = "cells"
    behavior_dims = 1

    def behavior(self, completion: str, **_: Any) -> list[float]:
        return [int(completion[1]) / 10]


LETTER_REWARD = _reward_table({"a1": 1.0, "b1": 2.0, "a6": 1.0, "a9": 1.0, "c3": 1.0, "e6": 3.0, "d9": 0.5})


def test_qd_archive_bonuses_over_two_steps(tiny_qwen3: Path, tmp_path: Path) -> None:
    steps = [["a1", "b1", "a6", "a9"], ["b1", "c3", "e6", "d9"]]
    trainer, record = _train_scripted(tiny_qwen3, tmp_path, steps, LETTER_REWARD, task=_CellTask(), qd=True,
                                      qd_dims=[4], qd_beta_new=0.5, qd_beta_imp=0.3)
    # step 1: b1 beats a1 in cell 0 (only the best of a cell enters); a6, a9 open cells 2 and 3
    assert record[0]["divrl_bonus"] == pytest.approx([0.0, 0.5, 0.5, 0.5])
    # step 2: b1 only ties the elite; c3 opens cell 1; e6 improves cell 2 (1 -> 3); d9 is worse than a9
    assert record[1]["divrl_bonus"] == pytest.approx([0.0, 0.5, 0.3, 0.0])
    history = trainer.state.log_history
    assert logged(history, "qd/new_cells") == [3.0, 1.0]
    assert logged(history, "qd/coverage") == [0.75, 1.0]
    assert logged(history, "qd/qd_score") == pytest.approx([4.0, 7.0])  # elites 2+1+1, then 2+1+3+1


@pytest.mark.parametrize(("scope", "second_group"), [("prompt", [0.0, 0.5, 0.5, 0.5]), ("global", [0.0] * 4)])
def test_qd_archive_scope(scope: str, second_group: list[float], tiny_qwen3: Path, tmp_path: Path) -> None:
    completions = ["a1", "b1", "a6", "a9"] * 2  # two prompts, same completions
    _, record = _train_scripted(tiny_qwen3, tmp_path, [completions], LETTER_REWARD, task=_CellTask(), qd=True,
                                qd_dims=[4], qd_archive=scope)
    assert record[0]["divrl_bonus"] == pytest.approx([0.0, 0.5, 0.5, 0.5] + second_group)


def test_novelty_bonus_is_knn_distance_to_memory(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.core import hashed_ngram_embedding

    steps = [["abc", "abd", "xyz", "hello"], ["abc", "qqq", "hello world", "xy"]]
    reward = _reward_table({text: float(len(text)) for step in steps for text in step})
    trainer, record = _train_scripted(tiny_qwen3, tmp_path, steps, reward, novelty_coef=0.3, novelty_k=2,
                                      max_completion_length=16)
    assert record[0]["divrl_bonus"] == [0.0] * 4  # empty memory
    distances = torch.cdist(hashed_ngram_embedding(steps[1]), hashed_ngram_embedding(steps[0]))
    expected = 0.3 * distances.sort(dim=1).values[:, :2].mean(dim=1)
    assert record[1]["divrl_bonus"] == pytest.approx(expected.tolist(), abs=1e-6)
    assert record[1]["divrl_bonus"][0] < record[1]["divrl_bonus"][1]  # "abc" was seen, "qqq" was not
    assert logged(trainer.state.log_history, "maxent/novelty") == pytest.approx([0.0, expected.mean().item()])


@pytest.mark.parametrize("scope", ["prompt", "global"])
def test_count_bonus_counts_valid_outcomes_across_steps(scope: str, tiny_qwen3: Path, tmp_path: Path) -> None:
    steps = [["a", "a", "b", "x", "a", "b", "b", "b"], ["a", "c", "x", "x", "c", "c", "b", "a"]]
    reward = _reward_table({"a": 1.0, "b": 1.0, "c": 1.0, "x": 0.0})  # x is invalid: no bonus, not counted
    trainer, record = _train_scripted(tiny_qwen3, tmp_path, steps, reward, count_bonus_coef=0.5,
                                      count_bonus_scope=scope, ips_outcome_key="text")

    def bonus(n: int) -> float:
        return 0.5 / math.sqrt(1 + n)

    if scope == "prompt":  # the two groups are two prompts: each counts its own outcomes
        assert record[0]["divrl_bonus"] == pytest.approx([bonus(2), bonus(2), bonus(1), 0.0,
                                                          bonus(1), bonus(3), bonus(3), bonus(3)])
        # step 2 samples the dataset's two other prompts (one epoch of 4 prompts): fresh counts
        assert record[1]["divrl_bonus"] == pytest.approx([bonus(1), bonus(1), 0.0, 0.0,
                                                          bonus(2), bonus(2), bonus(1), bonus(1)])
    else:  # a: 3 and b: 4 over both prompts; then a: 3 + 2, c: 3, b: 4 + 1
        assert record[0]["divrl_bonus"] == pytest.approx([bonus(3), bonus(3), bonus(4), 0.0,
                                                          bonus(3), bonus(4), bonus(4), bonus(4)])
        assert record[1]["divrl_bonus"] == pytest.approx([bonus(5), bonus(3), 0.0, 0.0,
                                                          bonus(3), bonus(3), bonus(5), bonus(5)])
        assert logged(trainer.state.log_history, "count/distinct_outcomes") == [2.0, 3.0]
    assert record[0]["table_reward"] == [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]  # no IPS scaling without `ips`


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_length_conditional_advantages(scale: str, tiny_qwen3: Path, tmp_path: Path) -> None:
    tokenizer = _tokenizer(tiny_qwen3)
    texts = ["x", "x x", "x x x", "x x x x", "x x x x x", "x x x x x x"]
    lengths = [len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts]
    assert lengths == sorted(set(lengths)), "test needs strictly increasing token lengths"
    order = [3, 0, 5, 1, 4, 2]  # completion i has length rank order[i]
    completions = [texts[r] for r in order]
    rewards = [1.0, 3.0, 2.0, 2.0, 0.0, 4.0]
    reward = _reward_table(dict(zip(completions, rewards, strict=True)))
    trainer, record = _train_scripted(tiny_qwen3, tmp_path, [completions], reward, num_generations=6,
                                      length_bins=3, max_completion_length=32, scale_rewards=scale)
    # length ranks -> bins {0,1}: 0, {2,3}: 1, {4,5}: 2; centre within each bin, then divide by the bin's
    # ("group") or the batch's ("batch") unbiased std + 1e-4, or by nothing ("none"), as TRL's scale_rewards
    bins: dict[int, list[int]] = {}
    for i, rank in enumerate(order):
        bins.setdefault(rank // 2, []).append(i)
    expected = [0.0] * 6
    for members in bins.values():
        values = torch.tensor([rewards[i] for i in members])
        for i in members:
            spread = {"group": values.std() + 1e-4, "batch": torch.tensor(rewards).std() + 1e-4, "none": 1.0}[scale]
            expected[i] = ((rewards[i] - values.mean()) / spread).item()
    assert record[0]["advantages"] == pytest.approx(expected, abs=1e-5)
    trained_on = trainer._buffered_inputs[0]["advantages"].tolist()  # what the loss used (shuffled)
    assert sorted(trained_on) == pytest.approx(sorted(expected), abs=1e-5)


def test_entropy_coefficient_follows_dual_descent(tiny_qwen3: Path, tmp_path: Path) -> None:
    steps = [["ab", "cd", "ef", "gh"]] * 3
    reward = _reward_table({"ab": 1.0, "cd": 2.0, "ef": 3.0, "gh": 4.0})
    trainer, _ = _train_scripted(tiny_qwen3, tmp_path, steps, reward, maxent_entropy_target=10.0,
                                 maxent_alpha_lr=0.1)
    history = trainer.state.log_history
    entropy, alpha, applied = (logged(history, k) for k in ("entropy", "maxent/alpha", "entropy_coef"))
    expected, current = [], 0.0
    for h in entropy:
        current = max(0.0, current - 0.1 * (h - 10.0))
        expected.append(current)
    assert alpha == pytest.approx(expected, rel=1e-5)
    assert applied == pytest.approx([0.0, *expected[:-1]], rel=1e-5)  # TRL applies last step's alpha


@pytest.mark.parametrize("scale, accumulation", [(2.0, 1), (0.5, 1), (2.0, 2)])
def test_auto_entropy_target_runs_trls_adaptive_controller(scale: float, accumulation: int, tiny_qwen3: Path,
                                                           tmp_path: Path) -> None:
    # 'auto': divrl measures H* on the first step (no bonus), then TRL's own use_adaptive_entropy code steps
    # entropy_coef by +- entropy_coef_delta within [entropy_coef_min, entropy_coef_max] (scale 2: always below the
    # target, up to the cap; 0.5: always above, down to the floor), over every micro-batch of the step.
    steps = [["ab", "cd", "ef", "gh"]] * 4
    reward = _reward_table({"ab": 1.0, "cd": 2.0, "ef": 3.0, "gh": 4.0})
    delta, low, high = 0.1, 0.05, 0.25
    trainer, _ = _train_scripted(tiny_qwen3, tmp_path, steps, reward, maxent_entropy_target="auto",
                                 maxent_entropy_auto_scale=scale, entropy_coef_delta=delta, entropy_coef_min=low,
                                 entropy_coef_max=high, per_device_train_batch_size=4 // accumulation,
                                 gradient_accumulation_steps=accumulation)
    history = trainer.state.log_history
    entropy, alpha, coef = (logged(history, k) for k in ("entropy", "maxent/alpha", "entropy_coef"))
    control = trainer.diversity_state["maxent_entropy"].controller
    target = scale * entropy[0]
    assert control.target == pytest.approx(target, rel=1e-5)
    assert trainer.use_adaptive_entropy  # TRL's controller runs from the step after the measurement
    assert trainer.args.entropy_target == 0.2  # H* is TRL's target only while a loss runs: the config is the user's
    expected, current = [0.0], 0.0  # TRL's rule (grpo_trainer._compute_loss) on each step's entropy
    for h in entropy[1:]:
        current = min(current + delta, high) if h <= target else max(current - delta, low)
        expected.append(current)
    assert expected[1:] == pytest.approx([0.1, 0.2, 0.25] if scale > 1 else [0.05] * 3)  # both branches met
    assert coef == pytest.approx(expected) and alpha == pytest.approx(expected)  # TRL's log and divrl's agree
    assert trainer.entropy_coef == pytest.approx(expected[-1]) and control.entropy_coef == trainer.entropy_coef
    assert trainer._last_world_entropy == pytest.approx(entropy[-1], rel=1e-5)
    state = control.state_dict()
    assert state["auto"] == {"scale": scale, "steps": 1, "entropy_sum": pytest.approx(entropy[0], rel=1e-5),
                             "measured": 1}


def test_entropy_far_below_target_warns_once(tiny_qwen3: Path, tmp_path: Path, caplog) -> None:
    steps = [["ab", "cd", "ef", "gh"]] * 3
    reward = _reward_table({"ab": 1.0, "cd": 2.0, "ef": 3.0, "gh": 4.0})
    with caplog.at_level("WARNING", logger="divrl.methods.maxent_entropy"):
        trainer, _ = _train_scripted(tiny_qwen3, tmp_path, steps, reward, maxent_entropy_target=100.0,
                                     maxent_warn_steps=2)
    warnings = [r.getMessage() for r in caplog.records if "far below its target" in r.getMessage()]
    assert len(warnings) == 1 and "H* = 100.000 for 2 steps" in warnings[0]  # at step 2, not again at step 3
    assert trainer.diversity_state["maxent_entropy"].controller.far_below_steps == 3
    caplog.clear()
    with caplog.at_level("WARNING", logger="divrl.methods.maxent_entropy"):
        _train_scripted(tiny_qwen3, tmp_path / "quiet", steps, reward, maxent_entropy_target=100.0,
                        maxent_warn_steps=0)
    assert not [r for r in caplog.records if "far below its target" in r.getMessage()]


def test_auto_entropy_far_below_target_warns_with_trls_controller(tiny_qwen3: Path, tmp_path: Path, caplog) -> None:
    # 'auto' x 3: entropy near the start is at most half the target, so TRL's controller raises its coefficient at
    # every step after the measurement (steps 2-4): the warning fires once, at the second of them.
    steps = [["ab", "cd", "ef", "gh"]] * 4
    reward = _reward_table({"ab": 1.0, "cd": 2.0, "ef": 3.0, "gh": 4.0})
    with caplog.at_level("WARNING", logger="divrl.methods.maxent_entropy"):
        trainer, _ = _train_scripted(tiny_qwen3, tmp_path, steps, reward, maxent_entropy_target="auto",
                                     maxent_entropy_auto_scale=3.0, maxent_warn_steps=2)
    warnings = [r.getMessage() for r in caplog.records if "far below its target" in r.getMessage()]
    control = trainer.diversity_state["maxent_entropy"].controller
    assert len(warnings) == 1 and f"H* = {control.target:.3f} for 2 steps" in warnings[0]
    assert "coefficient rose to 0.01" in warnings[0] and "entropy_coef_max" in warnings[0]  # TRL's 2 x 0.005
    assert control.far_below_steps == 3


@pytest.mark.parametrize("quantile", [1.0, 0.5])
def test_entropy_controller_measures_the_tokens_the_bonus_acts_on(quantile: float, tiny_qwen3: Path,
                                                                   tmp_path: Path) -> None:
    # Issue 14.5: with top_entropy_quantile < 1 TRL's bonus acts on the top-entropy tokens; the controller measured
    # every completion token, so it drove a quantity the bonus does not act on.
    from divrl import DivRLTrainer

    tokenizer = _tokenizer(tiny_qwen3)
    trainer = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                           args=make_config(tmp_path, maxent_entropy_target=10.0, top_entropy_quantile=quantile,
                                            temperature=0.05),  # sharpens the tiny model's near-uniform tokens
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    randomize_lora(trainer.model)
    inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
    controller, measured = trainer.diversity_state["maxent_entropy"].controller, []
    update = controller.update
    controller.update = lambda entropy: (measured.append(entropy), update(entropy))[1]
    trainer.compute_loss(trainer.model, inputs)

    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    with torch.no_grad():
        logits = trainer.model(input_ids=input_ids, attention_mask=attention).logits.float()[:, -width - 1 : -1]
    logp = torch.log_softmax(logits / 0.05, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    mask = inputs["completion_mask"].bool()
    top = (entropy >= torch.quantile(entropy[mask], 1 - quantile)) & mask
    assert len(measured) == 1 and measured[0] == pytest.approx(entropy[top].mean().item(), rel=1e-4)
    if quantile < 1:
        assert top.sum() < mask.sum() and abs(entropy[top].mean() - entropy[mask].mean()) > 0.01 * entropy[mask].mean()


# ------------------------------------------------------------------------------------------- divergences
def _generation_batch(trainer, tokenizer, completions: list[str]) -> dict[str, Any]:
    """Generate-and-score one batch of scripted completions in train mode (what the loss receives)."""
    from divrl.testing import scripted_generation

    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    rows = [trainer.train_dataset[i // trainer.num_generations] for i in range(len(completions))]
    with scripted_generation(tokenizer, lambda prompt, row: completions[row]):
        return trainer._generate_and_score_completions(rows)


COMPLETIONS = ["the answer is 5", "2 + 3 = 5", "five", "it is 4 or 5"]


def _generator(kind: str, rho: torch.Tensor) -> torch.Tensor:
    if kind == "reverse_kl":
        return rho - 1 - rho.log()
    if kind == "forward_kl":
        return rho * rho.log() - rho + 1
    if kind == "js":
        return 0.5 * (rho * torch.log(2 * rho / (1 + rho)) + torch.log(2 / (1 + rho)))
    a = 0.5
    return (rho**a - 1 - a * (rho - 1)) / (a * (a - 1))


def test_reverse_kl_value_equals_trl_beta_term(tiny_qwen3: Path, tmp_path: Path) -> None:
    """Same estimate as TRL's k3 term; the gradients differ (TRL's is the forward KL's, see core.divergence)."""
    from trl import GRPOConfig, GRPOTrainer

    from divrl import DivRLTrainer

    tokenizer = _tokenizer(tiny_qwen3)
    common = dict(loss_type="bnpo")
    ours = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                        args=make_config(tmp_path / "a", divergence="reverse_kl", divergence_coef=0.3, beta=0.0,
                                         **common),
                        train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    trl_trainer = GRPOTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                              args=GRPOConfig(**base_settings(tmp_path / "b", beta=0.3, **common)),
                              train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    losses, divergences = [], []
    for trainer, key in ((ours, "divergence/reverse_kl"), (trl_trainer, "kl")):
        randomize_lora(trainer.model)
        inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
        losses.append(trainer.compute_loss(trainer.model, inputs).item())
        divergences.append(trainer._metrics["train"][key][-1])
    assert divergences[0] > 1e-3  # the randomised adapter moved the policy away from the reference
    assert divergences[0] == pytest.approx(divergences[1], rel=1e-5)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


@pytest.mark.parametrize("loss_type", ["dapo", "cispo"])
def test_divergence_behaviour_correction_is_truncated_like_trls_ratio(loss_type: str, tiny_qwen3: Path,
                                                                      tmp_path: Path) -> None:
    # Issue 14.6: with a reused batch the divergence term is weighted by pi / pi_old, which was clamped only at
    # e^20; it is now truncated as TRL bounds its own ratio: [1 - epsilon, 1 + epsilon_high] (CISPO: <= epsilon_high).
    from divrl import DivRLTrainer

    tokenizer = _tokenizer(tiny_qwen3)
    trainer = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                           args=make_config(tmp_path, divergence="forward_kl", divergence_coef=0.3, epsilon=0.2,
                                            epsilon_high=5.0 if loss_type == "cispo" else 0.28, loss_type=loss_type),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    randomize_lora(trainer.model)
    inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    policy = completion_logps(trainer.model, input_ids, attention, width)
    with trainer.model.disable_adapter():
        reference = completion_logps(trainer.model, input_ids, attention, width)
    shift = 6.0 * torch.tensor([1.0, -1.0]).repeat(width)[:width]  # pi / pi_old = e^6 and e^-6 in turn
    inputs["old_per_token_logps"] = (policy - shift).detach()
    trainer.compute_loss(trainer.model, inputs)

    low, high = (0.0, 5.0) if loss_type == "cispo" else (0.8, 1.28)
    weight = shift.exp().clamp(low, high)
    mask = inputs["completion_mask"].float()
    expected = (_generator("forward_kl", (reference - policy).exp()) * weight * mask).sum() / mask.sum()
    assert trainer._metrics["train"]["divergence/forward_kl"][-1] == pytest.approx(expected.item(), rel=1e-3)


@pytest.mark.parametrize("kind", ["reverse_kl", "forward_kl", "js", "alpha"])
def test_policy_sample_divergence_matches_direct_computation(kind: str, tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl import DivRLTrainer

    tokenizer = _tokenizer(tiny_qwen3)
    trainer = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                           args=make_config(tmp_path, divergence=kind, divergence_coef=0.3, divergence_alpha=0.5),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    randomize_lora(trainer.model)
    inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
    loss_with = trainer.compute_loss(trainer.model, inputs).item()
    value = trainer._metrics["train"][f"divergence/{kind}"][-1]

    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    width = inputs["completion_ids"].shape[1]
    policy = completion_logps(trainer.model, input_ids, attention, width)
    with trainer.model.disable_adapter():
        reference = completion_logps(trainer.model, input_ids, attention, width)
    mask = inputs["completion_mask"].float()
    expected = (_generator(kind, (reference - policy).exp()) * mask).sum() / mask.sum()
    assert value > 1e-4
    assert value == pytest.approx(expected.item(), rel=1e-3)
    trainer.args.divergence_coef = 0.0  # same inputs, no divergence term: the loss drops by coef x value
    loss_without = super(DivRLTrainer, trainer)._compute_loss(trainer.model, inputs).item()
    assert loss_with - loss_without == pytest.approx(0.3 * value, rel=1e-4)

    # Its gradient is the score-function one, (f - rho f') d log pi per token, not the pathwise gradient of f.
    trainer.args.divergence_coef = 0.3
    lora = [p for n, p in trainer.model.named_parameters() if "lora_" in n]
    grpo_loss = super(DivRLTrainer, trainer)._compute_loss(trainer.model, inputs)
    term = trainer.compute_loss(trainer.model, inputs) - grpo_loss
    got = torch.autograd.grad(term, lora)
    logits = trainer.model(input_ids=input_ids, attention_mask=attention).logits.float()[:, -width - 1 : -1]
    policy = torch.log_softmax(logits, dim=-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    log_rho = (reference - policy).detach()
    rho = log_rho.exp()
    derivative = torch.autograd.functional.jacobian(lambda r: _generator(kind, r).sum(), rho)
    score = (_generator(kind, rho) - rho * derivative) * mask  # (f(rho) - rho f'(rho)) per token
    want = torch.autograd.grad(0.3 * (score * policy).sum() / mask.sum(), lora)
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, rtol=1e-3, atol=1e-7)


def test_rehearsal_divergence_on_reference_samples(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl import DivRLTrainer, sample_reference
    from divrl.methods.rehearsal import RehearsalSet

    tokenizer = _tokenizer(tiny_qwen3)
    from transformers import AutoModelForCausalLM

    reference_model = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    path = sample_reference(reference_model, tokenizer, ["solve 2 + 3", "the answer is"], tmp_path / "rehearsal",
                            num_samples=2, max_new_tokens=6)
    trainer = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                           args=make_config(tmp_path / "out", divergence="forward_kl", divergence_coef=0.3,
                                            divergence_estimator="rehearsal", divergence_rehearsal_path=str(path),
                                            divergence_rehearsal_batch_size=4),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
    trainer.compute_loss(trainer.model, inputs)
    at_init = trainer._metrics["train"]["divergence/forward_kl"][-1]
    assert at_init == pytest.approx(0.0, abs=1e-5)  # stored log-probs match the trainer's own forward

    randomize_lora(trainer.model)
    trainer.compute_loss(trainer.model, inputs)  # the cursor wrapped: the same 4 rows again
    value = trainer._metrics["train"]["divergence/forward_kl"][-1]
    batch = RehearsalSet(path, temperature=1.0).batch(range(4), tokenizer.pad_token_id)
    width = batch["completion_mask"].shape[1]
    policy = completion_logps(trainer.model, batch["input_ids"], batch["attention_mask"], width)
    rho = (batch["ref_logps"] - policy).exp()
    mask = batch["completion_mask"].float()
    expected = (_generator("forward_kl", rho) / rho * mask).sum() / mask.sum()
    assert value > 1e-4
    assert value == pytest.approx(expected.item(), rel=1e-3)


def test_rehearsal_set_at_another_temperature_is_refused(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from divrl import sample_reference
    from divrl.methods.rehearsal import RehearsalSet

    path = sample_reference(AutoModelForCausalLM.from_pretrained(tiny_qwen3), _tokenizer(tiny_qwen3), ["hi"],
                            tmp_path / "r", num_samples=1, max_new_tokens=3, temperature=0.7)
    with pytest.raises(ValueError, match="temperature 0.7 but training uses temperature 1.0"):
        RehearsalSet(path, temperature=1.0)


def test_collapse_signals_are_logged_for_plain_grpo(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.core import hashed_ngram_embedding, mean_pairwise_cosine_distance

    completions = ["aa", "aa", "bb", "cc", "dd", "dd", "dd", "dd"]
    reward = _reward_table({"aa": 1.0, "bb": 2.0, "cc": 3.0, "dd": 1.0})
    trainer, _ = _train_scripted(tiny_qwen3, tmp_path, [completions], reward)
    history = trainer.state.log_history
    expected = (mean_pairwise_cosine_distance(hashed_ngram_embedding(completions[:4])) + 0.0) / 2  # group 2: one text
    assert logged(history, "diversity/pairwise") == pytest.approx([expected])
    assert expected > 0.3
    assert logged(history, "reward/max") == [3.0]


def test_distinct_valid_outcomes_and_unshaped_rewards_are_logged_for_every_method(tiny_qwen3: Path,
                                                                                  tmp_path: Path) -> None:
    from trainer_helpers import ToyTask

    from divrl.core import hashed_ngram_embedding, vendi_score_of_embeddings

    # outcome key = first character; "ab" and "ax" share outcome "a"; "zz" scores 0 so it is not valid
    completions = ["ab", "ax", "bb", "zz", "cc", "cc", "cd", "dd"]
    reward = _reward_table({"ab": 1.0, "ax": 1.0, "bb": 2.0, "zz": 0.0, "cc": 1.0, "cd": 1.0, "dd": 4.0})
    for method in ({}, {"ips": True}):
        trainer, _ = _train_scripted(tiny_qwen3, tmp_path / str(len(method)), [completions], reward,
                                     task=ToyTask(), **method)
        history = trainer.state.log_history
        assert logged(history, "diversity/distinct_valid") == [(2 + 2) / 2]  # {a, b} and {c, d}
        vendi = [math.exp(-sum(p * math.log(p) for p in freqs)) for freqs in ((2 / 3, 1 / 3), (3 / 4, 1 / 4))]
        assert logged(history, "diversity/vendi_valid") == pytest.approx([sum(vendi) / 2])  # a a b | c c c d
        by_text = [vendi_score_of_embeddings(hashed_ngram_embedding(completions[g : g + 4])) for g in (0, 4)]
        assert logged(history, "diversity/vendi_ngram") == pytest.approx([sum(by_text) / 2])
        assert logged(history, "divrl/task_reward") == pytest.approx([11 / 8])  # unshaped, also under IPS
        assert logged(history, "divrl/primary_reward") == pytest.approx([11 / 8])


def test_groups_without_signal_count_equal_rewards_despite_fp32_residue(tiny_qwen3: Path, tmp_path: Path) -> None:
    from trainer_helpers import ToyTask

    # group 1: eight completions of reward 1.2 (an fp32 group std of ~1e-7, not 0); group 2: rewards that differ
    completions = ["aa", "aa", "aa", "aa", "bb", "bb", "cc", "dd"] + ["ee", "ff", "gg", "hh", "ii", "jj", "kk", "ll"]
    reward = _reward_table({**dict.fromkeys(completions[:8], 1.2),
                            **{text: float(i) for i, text in enumerate(completions[8:])}})
    for method, expected in (({}, 0.5), ({"ips": True}, 0.0)):  # IPS rewards group 1's rarer outcomes more
        trainer, _ = _train_scripted(tiny_qwen3, tmp_path / str(len(method)), [completions], reward,
                                     task=ToyTask(), num_generations=8, **method)
        assert logged(trainer.state.log_history, "divrl/groups_without_signal") == [expected]


def test_zero_flat_groups_gives_a_flat_group_advantage_exactly_zero(tiny_qwen3: Path, tmp_path: Path) -> None:
    completions = ["aa"] * 8 + ["bb", "cc", "dd", "ee", "ff", "gg", "hh", "ii"]
    reward = _reward_table({"aa": 1.2, **{text: float(i) for i, text in enumerate(completions[8:])}})
    runs = {}
    for zero in (False, True):
        trainer, steps = _train_scripted(tiny_qwen3, tmp_path / str(zero), [completions], reward, num_generations=8,
                                         zero_flat_groups=zero)
        runs[zero] = (steps[0]["advantages"], sorted(trainer._buffered_inputs[0]["advantages"].tolist()))
    (logged_off, _), (logged_on, trained_on) = runs[False], runs[True]
    assert min(logged_off[:8]) > 1e-4  # TRL's fp32 residue on the all-1.2 group, same sign for every row
    assert logged_on[:8] == [0.0] * 8 and logged_on[8:] == logged_off[8:]
    assert sorted([0.0] * 8 + logged_off[8:]) == pytest.approx(trained_on, abs=1e-6)  # what the loss used


def test_unlikeliness_scales_rewards_by_likelihood_rank(tiny_qwen3: Path, tmp_path: Path) -> None:
    # "Rewarding the Unlikely": r * (1 - beta * rank / G), rank by mean per-token log-prob (0 = least likely).
    from transformers import AutoModelForCausalLM

    completions = ["aa", "hey", "zq", "the"]
    reward = _reward_table(dict.fromkeys(completions, 1.0))
    seen: list[str] = []

    def script(prompt: str, row: int) -> str:
        seen.append(prompt)
        return completions[row]

    from divrl import DivRLTrainer
    from divrl.testing import scripted_generation

    tokenizer = _tokenizer(tiny_qwen3)
    recorder = _RecordRewards()
    trainer = DivRLTrainer(str(tiny_qwen3), reward, args=make_config(tmp_path, max_steps=1, unlikeliness_beta=0.5),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config(),
                           callbacks=[recorder.callback])
    recorder.trainer = trainer
    with scripted_generation(tokenizer, script):
        trainer.train()
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen3)
    prompt_ids = tokenizer(seen[0], add_special_tokens=False)["input_ids"]
    means = []
    for text in completions:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        input_ids = torch.tensor([prompt_ids + ids])
        means.append(completion_logps(base, input_ids, torch.ones_like(input_ids), len(ids)).mean().item())
    ranks = torch.tensor(means).argsort().argsort()
    expected = (1 - 0.5 * ranks / 4).tolist()
    assert sorted(expected) == [0.625, 0.75, 0.875, 1.0]
    assert recorder.steps[0]["table_reward"] == pytest.approx(expected)


def test_unlikeliness_ranks_by_the_cpu_samplers_log_probs_without_an_extra_forward(tiny_qwen3: Path,
                                                                                   tmp_path: Path) -> None:
    # Sampling for real (no script): the ranks come from the probabilities divrl's CPU sampler drew the tokens
    # with, which equal a plain forward's at temperature 0.8, and the step runs no forward more than without it.
    from transformers import AutoModelForCausalLM

    from divrl import DivRLTrainer

    def constant_reward(completions: list, **_: Any) -> list[float]:
        return [1.0] * len(completions)

    tokenizer = _tokenizer(tiny_qwen3)
    forwards: dict[float, int] = {}
    for beta in (0.0, 0.5):
        recorder = _RecordRewards()
        trainer = DivRLTrainer(str(tiny_qwen3), constant_reward, train_dataset=prompt_dataset(),
                               args=make_config(tmp_path / str(beta), max_steps=1, temperature=0.8,
                                                unlikeliness_beta=beta),
                               processing_class=tokenizer, peft_config=lora_config(), callbacks=[recorder.callback])
        recorder.trainer = trainer
        forwards[beta] = 0
        generated: list[tuple] = []
        logps_and_entropies, sequence_logps = trainer._get_per_token_logps_and_entropies, trainer._sequence_logps

        def counted(*args: Any, _inner=logps_and_entropies, _beta=beta, **kwargs: Any) -> Any:
            forwards[_beta] += 1
            return _inner(*args, **kwargs)

        def captured(_inner=sequence_logps, _trainer=trainer, _generated=generated) -> torch.Tensor:
            _generated.append(_trainer._scratch.generated)
            return _inner()

        trainer._get_per_token_logps_and_entropies, trainer._sequence_logps = counted, captured
        trainer.train()
    assert forwards[0.5] == forwards[0.0] > 0
    prompt_ids, completion_ids, sampled = generated[0]
    assert sampled is not None  # the sampler's own log-probs, not a forward
    base = AutoModelForCausalLM.from_pretrained(tiny_qwen3)  # the LoRA adapter starts as the identity
    means = []
    for prompt, completion in zip(prompt_ids, completion_ids, strict=True):
        input_ids = torch.tensor([prompt + completion])
        expected = completion_logps(base, input_ids, torch.ones_like(input_ids), len(completion), temperature=0.8)
        assert sampled[len(means)] == pytest.approx(expected[0].tolist(), abs=1e-4)
        means.append(expected.mean().item())
    ranks = torch.tensor(means).argsort().argsort()
    assert recorder.steps[0]["constant_reward"] == pytest.approx((1 - 0.5 * ranks / 4).tolist())


def test_passk_replaces_advantages_by_best_of_k_advantages(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl.core import passk_advantages

    completions = ["aa", "bb", "cc", "dd", "aa", "aa", "aa", "bb"]
    reward = _reward_table({"aa": 0.0, "bb": 1.0, "cc": 0.5, "dd": 2.0})
    _, steps = _train_scripted(tiny_qwen3, tmp_path, [completions], reward, passk=2)
    rewards = torch.tensor([0.0, 1.0, 0.5, 2.0, 0.0, 0.0, 0.0, 1.0])
    assert steps[0]["advantages"] == pytest.approx(passk_advantages(rewards, 4, 2).tolist(), abs=1e-5)
    # the second group: only "bb" reaches 1; the zeros still gain through the pairs they share with it
    assert steps[0]["advantages"][7] > 0 and steps[0]["advantages"][4] < 0


def test_semantic_outcome_classes_key_ips_and_persist_across_steps(tiny_qwen3: Path, tmp_path: Path) -> None:
    # Leader clustering of hashed n-grams: the three cat sentences (cosine >= 0.8) are one outcome, the dog another.
    steps = [["the cat sat on the mat", "the cat sat on a mat", "dogs run far away", "the cat sat on the mat."],
             ["dogs run far away", "dogs run far away", "the cat sat on a mat", "birds sing at dawn"]]
    reward = _reward_table(dict.fromkeys(steps[0] + steps[1], 1.0))
    trainer, record = _train_scripted(tiny_qwen3, tmp_path, steps, reward, ips=True, ips_outcome_key="semantic",
                                      semantic_threshold=0.6, max_completion_length=32)
    assert record[0]["table_reward"] == pytest.approx([4 / 3, 4 / 3, 4.0, 4 / 3])
    assert record[1]["table_reward"] == pytest.approx([2.0, 2.0, 4.0, 4.0])
    assert logged(trainer.state.log_history, "semantic/classes") == [2.0, 3.0]  # the birds found the third class
    assert len(trainer.diversity_state["outcome_keys"].clusters) == 3


def _lora_grads(trainer) -> list[torch.Tensor]:
    return [p.grad for n, p in trainer.model.named_parameters() if "lora_" in n and p.grad is not None]


def test_clip_cov_stops_the_policy_gradient_of_the_selected_tokens(tiny_qwen3: Path, tmp_path: Path) -> None:
    # Every token eligible (ratio 1, bounds wide): Clip-Cov detaches them all, so the policy loss has no gradient.
    from divrl import DivRLTrainer

    tokenizer = _tokenizer(tiny_qwen3)
    trainer = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                           args=make_config(tmp_path, cov_method="clip_cov", cov_ratio=1.0,
                                            cov_clip_bounds=[-1e9, 1e9], max_completion_length=16),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    randomize_lora(trainer.model)
    inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
    trainer.compute_loss(trainer.model, inputs).backward()
    assert all(g.abs().max() == 0 for g in _lora_grads(trainer))
    assert trainer._metrics["train"]["cov/selected_fraction"][-1] == 1.0
    trainer.model.zero_grad()
    trainer.args.cov_method = None
    trainer.compute_loss(trainer.model, inputs).backward()
    assert any(g.abs().max() > 0 for g in _lora_grads(trainer))


def test_kl_cov_adds_the_absolute_log_ratio_on_the_top_covariance_tokens(tiny_qwen3: Path, tmp_path: Path) -> None:
    from divrl import DivRLTrainer

    tokenizer = _tokenizer(tiny_qwen3)
    trainer = DivRLTrainer(str(tiny_qwen3), _reward_table({c: float(len(c)) for c in COMPLETIONS}),
                           args=make_config(tmp_path, cov_method="kl_cov", cov_ratio=1.0, cov_kl_coef=2.0,
                                            num_iterations=2, max_completion_length=16),
                           train_dataset=prompt_dataset(), processing_class=tokenizer, peft_config=lora_config())
    randomize_lora(trainer.model)
    inputs = _generation_batch(trainer, tokenizer, COMPLETIONS)
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] - 0.5  # |log pi - log pi_old| = 0.5 everywhere
    with_term = trainer.compute_loss(trainer.model, inputs).item()
    trainer.args.cov_method = None
    without = trainer.compute_loss(trainer.model, inputs).item()
    assert with_term - without == pytest.approx(2.0 * 0.5, rel=1e-4)  # every token selected (ratio 1)


class _AllHooksTask(_CellTask):
    """Cells by digit, outcome = the text, and an embedding for novelty: every bonus has what it needs."""

    def outcome_key(self, completion: str, **_: Any) -> str:
        return completion

    def embed(self, completion: str, **_: Any) -> list[float]:
        return [float(ord(completion[0])), float(completion[1])]


def test_no_shaping_bonus_can_be_farmed_by_an_output_the_task_scores_0(tiny_qwen3: Path, tmp_path: Path) -> None:
    """Issue 29 item 10: z* completions score 0 (invalid); they fill new cells, are novel and unseen, and still earn
    no QD, novelty or count bonus, and their cells stay empty for a valid completion to fill later."""
    steps = [["z1", "z2", "z3", "a1", "z4", "z5", "z6", "z7"], ["a4", "z8", "a2", "a1", "z9", "a5", "a6", "a7"]]
    reward = _reward_table({text: 0.0 if text[0] == "z" else 1.0 for step in steps for text in step})
    trainer, record = _train_scripted(tiny_qwen3, tmp_path, steps, reward, task=_AllHooksTask(), qd=True,
                                      qd_dims=[10], novelty_coef=0.3, count_bonus_coef=0.5, ips_outcome_key="text")
    for step, row in zip(steps, record, strict=True):
        for text, bonus in zip(step, row["divrl_bonus"], strict=True):
            assert (bonus == 0.0) == text.startswith("z"), (text, bonus)
    from divrl.trainers.divrl_trainer import GLOBAL_ARCHIVE

    archive = trainer.diversity_state["qd"].archive(GLOBAL_ARCHIVE)
    assert archive.stats().num_elites == 6  # the cells of a1, a2, a4, a5, a6, a7: no z made an elite
    assert logged(trainer.state.log_history, "qd/new_cells") == [1.0, 5.0]  # a4 fills the cell z4 never took
    assert len(trainer.diversity_state["novelty"].memory) == 7  # only the 7 valid completions are remembered
