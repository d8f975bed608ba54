"""Population-GRPO in real LoRA training on tiny models: members train in turn with their own Adam state,
selections score, soup and restart them, and a resumed run restores the population exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from trainer_helpers import PROMPTS, ToyTask, lora_config, make_config, metric_keys, prompt_dataset, snapshot
from transformers import TrainerCallback

from divrl.trainers.population import adapter_parameters, lora_layers, soup_deltas


def population_trainer(model_dir: Path, out_dir: Path, trainer_name: str = "PopulationGRPOTrainer",
                       **overrides: Any):
    """A population trainer on 8 chat prompts (2 of them held out for scoring) with a toy task."""
    from transformers import AutoTokenizer

    import divrl

    settings: dict[str, Any] = dict(population_size=2, population_top_m=1, population_interval=2,
                                    population_held_prompts=2, max_steps=4)
    settings.update(overrides)
    callbacks = settings.pop("callbacks", None)
    task = settings.pop("task", None) or ToyTask()
    return getattr(divrl, trainer_name)(
        str(model_dir), args=make_config(out_dir, **settings), callbacks=callbacks,
        train_dataset=prompt_dataset(PROMPTS * 2, conversational=True),
        processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=lora_config(), task=task,
    )


def adam_steps(trainer: Any, member: str) -> set[int]:
    """The distinct AdamW step counts over a member's parameters (empty set: no optimizer state)."""
    state = trainer.optimizer.state
    return {int(state[p]["step"]) for p in adapter_parameters(trainer.model, member) if p in state}


class RecordSteps(TrainerCallback):
    """At each step end (before the population's own callback): members whose weights moved, Adam steps."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.changed: list[list[str]] = []
        self.adam: list[list[set[int]]] = []
        self._previous: dict[str, list[torch.Tensor]] = {}

    def member_weights(self) -> dict[str, list[torch.Tensor]]:
        return {m: [p.detach().clone() for p in adapter_parameters(self.trainer.model, m)]
                for m in self.trainer.population.member_names}

    def on_train_begin(self, args, state, control, **kwargs):
        self._previous = self.member_weights()

    def on_step_end(self, args, state, control, **kwargs):
        current = self.member_weights()
        self.changed.append([m for m in current if any(not a.equal(b) for a, b in
                                                       zip(current[m], self._previous[m]))])
        self.adam.append([adam_steps(self.trainer, m) for m in self.trainer.population.member_names])
        self._previous = current


@pytest.mark.slow
def test_members_train_in_turn_with_their_own_optimizer_state(tiny_model: Path, tmp_path: Path) -> None:
    recorder = RecordSteps()
    trainer = population_trainer(tiny_model, tmp_path, callbacks=[recorder])
    recorder.trainer = trainer
    before = snapshot(trainer.model)
    trainer.train()

    # Round robin, one member per step; a member's Adam state moves only on its own steps.
    assert recorder.changed == [["default"], ["member_1"], ["default"], ["member_1"]]
    assert recorder.adam == [[{1}, set()], [{1}, {1}], [{2}, {1}], [{2}, {2}]]
    after = snapshot(trainer.model)
    assert all(before[n].equal(after[n]) for n in before if "lora_" not in n), "base weights must stay frozen"
    # The selection after step 4 (K * T) restarted both members from the soup: fresh Adam state.
    assert trainer.population.state.soups == 1 and trainer.population.state.member_steps == [2, 2]
    assert all(adam_steps(trainer, m) == set() for m in trainer.population.member_names)
    assert len(trainer.population.state.selected) == 1
    expected = {"population/score_0", "population/score_1", "population/diversity_0", "population/max_reward_1",
                "population/selected_0", "population/soup_error", "population/reward_0", "population/reward_1"}
    assert not expected - metric_keys(trainer.state.log_history)


def test_selection_soups_the_top_members_exactly(tiny_qwen3: Path, tmp_path: Path) -> None:
    trainer = population_trainer(tiny_qwen3, tmp_path, population_size=3, population_top_m=2,
                                 population_sigma=0.0)
    model, names = trainer.model, trainer.population.member_names
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in names:
            for param in adapter_parameters(model, name):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    # S_k = d_k (1 + max R_k) = 0.5 * 2, 0.9 * 3, 0.6 * 2: members 1 and 2 are the top two.
    trainer.population.score_members = lambda: (torch.tensor([0.5, 0.9, 0.6]), torch.tensor([1.0, 2.0, 1.0]))
    exact = {n: d for n, _, d in soup_deltas(model, ["member_1", "member_2"])}

    trainer.population.run_selection()

    assert trainer.population.state.selected == [1, 2]
    assert trainer.population.state.scores == pytest.approx([1.0, 2.7, 1.2])
    for name, layer in lora_layers(model, "default"):
        u, s, vh = torch.linalg.svd(exact[name])
        best = (u[:, :4] * s[:4]) @ vh[:4]  # rank 4 = the LoRA rank
        for member in names:
            torch.testing.assert_close(layer.get_delta_weight(member), best, atol=1e-5, rtol=1e-4)
    assert 0 < trainer.population.state.soup_error < 1


def test_restart_keeps_every_member_within_sigma_of_the_soup(tiny_qwen3: Path, tmp_path: Path) -> None:
    # Issue 14.1: the restart noise is relative to the soup: every member's dW of every layer ends at exactly
    # population_sigma x ||dW_soup|| from the rank-r soup (the absolute N(0, 0.01^2) on the factors swamped it).
    trainer = population_trainer(tiny_qwen3, tmp_path, population_size=3, population_top_m=2,
                                 population_sigma=0.2)
    model, names = trainer.model, trainer.population.member_names
    for _, layer in lora_layers(model, "default"):  # a fresh adapter (dW = 0) starts unperturbed
        for member in names:
            assert float(layer.get_delta_weight(member).detach().abs().max()) == 0.0
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in names:
            for param in adapter_parameters(model, name):
                param.copy_(torch.randn(param.shape, generator=generator) * 1e-3)  # soup-sized factors
    trainer.population.score_members = lambda: (torch.tensor([0.5, 0.9, 0.6]), torch.tensor([1.0, 2.0, 1.0]))
    exact = {n: d for n, _, d in soup_deltas(model, ["member_1", "member_2"])}

    trainer.population.run_selection()

    members = {m: {n: layer.get_delta_weight(m).detach() for n, layer in lora_layers(model, m)} for m in names}
    for name in exact:
        u, s, vh = torch.linalg.svd(exact[name])
        soup = (u[:, :4] * s[:4]) @ vh[:4]
        for member in names:
            distance = float(torch.linalg.norm(members[member][name] - soup) / torch.linalg.norm(soup))
            assert distance == pytest.approx(0.2, rel=1e-3), (name, member)
    assert not torch.equal(members["member_1"][name], members["member_2"][name])  # each member its own noise


def test_scores_are_diversity_times_one_plus_max_reward(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from divrl.core import hashed_ngram_embedding, mean_pairwise_cosine_distance
    from divrl.testing import scripted_generation

    texts = ["ab", "abc", "xyz", "hi yo"]  # one per completion of a held prompt (G = 4)
    trainer = population_trainer(tiny_qwen3, tmp_path)
    with scripted_generation(AutoTokenizer.from_pretrained(tiny_qwen3), lambda prompt, row: texts[row % 4]):
        diversity, max_reward = trainer.population.score_members()

    expected = mean_pairwise_cosine_distance(hashed_ngram_embedding(texts))  # both held prompts alike
    torch.testing.assert_close(diversity, torch.tensor([expected, expected]))
    torch.testing.assert_close(max_reward, torch.tensor([5.0, 5.0]))  # distinct characters of "hi yo"
    assert trainer.state.num_input_tokens_seen == 0 and not trainer._metrics["train"]  # scoring leaves no trace


class StatefulTask(ToyTask):
    """A task whose reward keeps state like the molecule task: an oracle-call counter, a cache and a
    diversity-filter memory (a completion already seen scores 0), and logs through TRL's log_metric/log_extra."""

    def __init__(self) -> None:
        self.calls, self.cache, self.memory = 3, {"old": 1.0}, ["old"]

    def reward_funcs(self) -> list:
        return [self.reward]

    def reward(self, completions: list, log_metric: Any = None, log_extra: Any = None, **_: Any) -> list[float]:
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        scores = []
        for text in texts:
            if text not in self.cache:
                self.calls += 1
                self.cache[text] = float(len(set(text)))
            scores.append(0.0 if text in self.memory else self.cache[text])
            self.memory.append(text)
        log_metric("oracle_calls", float(self.calls))
        log_extra("filtered", [t in self.memory for t in texts])
        return scores

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "cache": self.cache, "memory": self.memory}  # live objects, as tasks may do

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls, self.cache, self.memory = state["calls"], state["cache"], state["memory"]


def test_scoring_leaves_task_state_and_metrics_as_they_were(tiny_qwen3: Path, tmp_path: Path) -> None:
    # Issue 14.3: scoring ran the task's reward functions on the scoring samples, which updated the reward cache,
    # the oracle-call counter and the diversity-filter memory, and queued log_metric/log_extra values into the
    # next training step. Every member must also be scored from the same state (member 1 must not be filtered
    # for what member 0 wrote).
    import copy

    from transformers import AutoTokenizer

    from divrl.testing import scripted_generation

    texts = ["ab", "abc", "xyz", "hi yo"]
    task = StatefulTask()
    before = copy.deepcopy(task.state_dict())
    trainer = population_trainer(tiny_qwen3, tmp_path, task=task)
    with scripted_generation(AutoTokenizer.from_pretrained(tiny_qwen3), lambda prompt, row: texts[row % 4]):
        _, max_reward = trainer.population.score_members()

    torch.testing.assert_close(max_reward, torch.tensor([5.0, 5.0]))  # both members scored from the same state
    assert task.state_dict() == before
    assert not trainer._pending_metrics and not trainer._pending_extra_logs and not trainer._metrics["train"]
    trainer.population.restart_from_soup = lambda diversity, max_reward: None
    trainer.population.scored_completions = 0
    with scripted_generation(AutoTokenizer.from_pretrained(tiny_qwen3), lambda prompt, row: texts[row % 4]):
        trainer.population.run_selection()
    assert trainer._metrics["train"]["population/scoring_completions"] == [2 * 2 * 4.0]  # K x held x G, on its own


class Capture(TrainerCallback):
    """Captures the trainer's population (see `capture`) at each checkpoint save and when training begins."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.saved: dict[int, dict[str, Any]] = {}
        self.begin: dict[str, Any] = {}

    def on_save(self, args, state, control, **kwargs):
        self.saved[state.global_step] = capture(self.trainer)

    def on_train_begin(self, args, state, control, **kwargs):
        self.begin = capture(self.trainer)


@pytest.mark.slow
def test_resume_restores_the_population_of_ips_qd_members(tiny_qwen3: Path, tmp_path: Path) -> None:
    # K = 2, T = 2: selection after step 4; the checkpoint at step 3 holds both members' Adam moments,
    # and member 1 needs its own at step 4.
    settings = dict(population=True, population_interval=2, max_steps=4, save_strategy="steps", save_steps=3,
                    ips=True, qd=True, trainer_name="DivRLTrainer")
    uninterrupted, resumed = Capture(), Capture()
    uninterrupted.trainer = population_trainer(tiny_qwen3, tmp_path, callbacks=[uninterrupted], **settings)
    uninterrupted.trainer.train()
    resumed.trainer = population_trainer(tiny_qwen3, tmp_path / "resumed", callbacks=[resumed], **settings)
    resumed.trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-3"))

    saved, restored = uninterrupted.saved[3], resumed.begin
    assert saved["population"]["member_steps"] == [2, 1] and saved["adam"]
    assert restored["diversity"][0] != restored["diversity"][1]  # each member has its own archive
    assert_same_population(restored, saved)
    # The resumed run then continues exactly like the uninterrupted one (selection at step 4 included).
    assert resumed.trainer.population.state.soups == 1
    assert_same_population(capture(resumed.trainer), capture(uninterrupted.trainer))


def assert_same_population(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual["population"] == expected["population"]
    assert actual["diversity"] == expected["diversity"]
    assert actual["weights"].keys() == expected["weights"].keys()
    for name, value in expected["weights"].items():
        assert actual["weights"][name].equal(value), name
    assert actual["adam"].keys() == expected["adam"].keys()
    for name, value in expected["adam"].items():
        assert all(actual["adam"][name][k].equal(v) for k, v in value.items()), name


def capture(trainer: Any) -> dict[str, Any]:
    """Population bookkeeping, member method states, member weights and their Adam moments, by name."""
    names = {id(p): n for n, p in trainer.model.named_parameters()}
    optimizer_state = trainer.optimizer.state if trainer.optimizer is not None else {}
    return {
        "population": trainer.population.state_dict()["population"],
        "diversity": [s.state_dict() for s in trainer.population.member_diversity_states()],
        "weights": {names[id(p)]: p.detach().clone() for p in trainer.population.member_parameters()},
        "adam": {names[id(p)]: {k: torch.as_tensor(v).clone() for k, v in optimizer_state[p].items()}
                 for p in trainer.population.member_parameters() if p in optimizer_state},
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"population_soup_rank": 8}, "population_soup_rank"),
        ({"population_held_prompts": 8}, "population_held_prompts"),
        ({"steps_per_generation": 1, "gradient_accumulation_steps": 2}, "steps_per_generation"),
        ({"population_interval": 3, "steps_per_generation": 2}, "population_interval"),
    ],
)
def test_trainer_misconfiguration_names_the_field(overrides: dict, message: str, tiny_qwen3: Path,
                                                  tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        population_trainer(tiny_qwen3, tmp_path, **overrides)


def test_population_needs_lora(tiny_qwen3: Path, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    import divrl

    with pytest.raises(ValueError, match="peft_config=peft.LoraConfig"):
        divrl.PopulationGRPOTrainer(
            str(tiny_qwen3), args=make_config(tmp_path), train_dataset=prompt_dataset(PROMPTS * 2),
            processing_class=AutoTokenizer.from_pretrained(tiny_qwen3), task=ToyTask(),
        )


@pytest.mark.parametrize("engine", ["is_deepspeed_enabled", "is_fsdp_enabled"])
def test_population_refuses_sharded_engines(engine: str, tiny_qwen3: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from divrl.trainers.population import Population

    setup = Population.__init__

    def under_sharding(self: Population, trainer) -> None:  # as if accelerate had set up DeepSpeed / FSDP
        setattr(trainer, engine, True)
        setup(self, trainer)

    monkeypatch.setattr(Population, "__init__", under_sharding)
    with pytest.raises(ValueError, match=r"DivRLConfig\.population is not supported under DeepSpeed or FSDP"):
        population_trainer(tiny_qwen3, tmp_path)


@pytest.mark.parametrize("method", [{"unlikeliness_beta": 0.25}, {"passk": 2}, {"count_bonus_coef": 0.5},
                                    {"ips_outcome_key": "semantic"}, {"cov_method": "clip_cov"},
                                    {"cov_method": "kl_cov", "num_iterations": 2}])
def test_issue_15_methods_compose_with_ips_in_a_population(method: dict[str, Any], tiny_qwen3: Path,
                                                         tmp_path: Path) -> None:
    trainer = population_trainer(tiny_qwen3, tmp_path, trainer_name="DivRLTrainer", population=True, ips=True,
                                 **method)
    trainer.train()
    assert trainer.population.state.soups == 1 and trainer.state.global_step == 4
    assert {"ips/max_scale", "population/score_0"} <= metric_keys(trainer.state.log_history)


def test_auto_entropy_gives_each_member_its_own_trl_controller(tiny_qwen3: Path, tmp_path: Path) -> None:
    # K = 2 members train in turn (steps 1, 3: member 0; 2, 4: member 1). With 'auto', each measures its own target
    # on its first step and then runs TRL's adaptive controller from its own coefficient (x 2: always below the
    # target, so +0.1 per own step): TRL's one entropy_coef per trainer holds the active member's.
    from trainer_helpers import logged

    trainer = population_trainer(tiny_qwen3, tmp_path, trainer_name="DivRLTrainer", population=True,
                                 maxent_entropy_target="auto", maxent_entropy_auto_scale=2.0, entropy_coef_delta=0.1)
    trainer.train()
    entropy, coef = logged(trainer.state.log_history, "entropy"), logged(trainer.state.log_history, "entropy_coef")
    controls = [s["maxent_entropy"].controller for s in trainer.population.member_diversity_states()]
    assert [c.target for c in controls] == pytest.approx([2 * entropy[0], 2 * entropy[1]], rel=1e-5)
    assert [c.entropy_coef for c in controls] == pytest.approx([0.1, 0.1])  # one step each on TRL's controller
    assert coef == pytest.approx([0.0, 0.0, 0.1, 0.1])  # a shared coefficient would reach 0.2 at step 4
