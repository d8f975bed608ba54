"""Shared HypoSpace machinery: export, splits, prompts, metrics, TRL rewards and trainer hooks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from divrl.task import Task, has_hook
from divrl.tasks.hypospace import (
    BooleanTask,
    CausalTask,
    HypoSpaceTask,
    Instance,
    VoxelTask,
    make_task,
    read_jsonl,
    write_jsonl,
)
from divrl.tasks.hypospace.metrics import recovery_curve, uniqueness, validity

TASKS: list[HypoSpaceTask] = [CausalTask(nodes=3), VoxelTask(grid=2, max_height=2, max_blocks=2), BooleanTask()]


@pytest.fixture(params=TASKS, ids=lambda t: t.domain)
def task(request: pytest.FixtureRequest) -> HypoSpaceTask:
    return request.param


def test_task_protocol_and_hooks(task: HypoSpaceTask) -> None:
    assert isinstance(task, Task)
    assert task.name == f"hypospace-{task.domain}"
    assert has_hook(task, "outcome_key") and has_hook(task, "behavior")
    assert len(task.behavior_names) == task.behavior_dims


def test_make_task_names_the_domain() -> None:
    assert isinstance(make_task("hypospace-voxel", grid=2), VoxelTask)
    with pytest.raises(ValueError, match="unknown HypoSpace domain 'dna'"):
        make_task("dna")


def test_jsonl_round_trip(task: HypoSpaceTask, tmp_path: Path) -> None:
    path = tmp_path / "instances.jsonl"
    assert write_jsonl(task.instances(), path) == len(task.instances())
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == {"id", "domain", "params", "observations", "hypotheses"}
    assert first["params"] == task.params and first["domain"] == task.domain
    assert read_jsonl(path) == task.instances()


def test_read_jsonl_names_the_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "domain": "voxel", "params": {}, "observations": [], "hypotheses": []}\n{"id": 3}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: .*'id'"):
        read_jsonl(path)


def test_splits_are_deterministic_disjoint_and_complete(task: HypoSpaceTask) -> None:
    train, test = task.split("train", seed=3), task.split("test", seed=3)
    assert train == task.split("train", seed=3) and test == task.split("test", seed=3)
    assert not {i.id for i in train} & {i.id for i in test}
    assert len(train) + len(test) == len(task.instances())
    assert abs(len(test) - len(task.instances()) / 2) <= 1
    assert task.split("test", seed=4) != test
    limited = task.split("all", seed=3, limit=5)
    assert len(limited) == 5 and {i.id for i in task.split("test", seed=3, limit=5)} <= {i.id for i in limited}
    dev, fit = task.split("dev", seed=4), task.split("fit", seed=4)  # train's held-out fifth and the rest
    assert {i.id for i in dev} | {i.id for i in fit} == {i.id for i in task.split("train", seed=4)}
    assert not {i.id for i in dev} & {i.id for i in fit} and len(dev) == round(0.2 * (len(dev) + len(fit)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"split": "validation"}, "unknown split"), ({"test_fraction": 1.5}, "test_fraction"), ({"limit": 0}, "limit")],
)
def test_split_arguments_are_checked(kwargs: dict, message: str) -> None:
    args = {"split": "test", **kwargs}
    with pytest.raises(ValueError, match=message):
        TASKS[0].split(**args)


def test_metrics_by_hand() -> None:
    admissible = frozenset({"a", "b", "c", "d"})
    proposals = ["a", None, "a", "z", "b", "c"]
    assert validity(proposals, admissible) == 4 / 6
    assert uniqueness(proposals) == 4 / 6  # a, z, b, c
    assert recovery_curve(proposals, admissible) == [0.25, 0.25, 0.25, 0.25, 0.5, 0.75]
    assert validity([], admissible) == 0.0 and uniqueness([]) == 0.0
    with pytest.raises(ValueError, match="non-empty admissible"):
        recovery_curve(["a"], frozenset())


def test_rewards_take_dataset_columns_as_kwargs(task: HypoSpaceTask) -> None:
    instance = task.instances()[-1]
    good = task.render_answer(instance.hypotheses[0])
    other = next(i for i in task.instances() if not set(i.hypotheses) & set(instance.hypotheses))
    wrong = task.render_answer(other.hypotheses[0])
    completions = [good, [{"role": "assistant", "content": good}], wrong, "garbage", ""]
    columns = {"hypotheses": [list(instance.hypotheses)] * 5, "observations": [list(instance.observations)] * 5}
    (validity_reward,) = task.reward_funcs()
    assert validity_reward(prompts=["p"] * 5, completions=completions, **columns) == [1.0, 1.0, 0.0, 0.0, 0.0]
    # Without H_O the semantic check gives the same answer.
    assert validity_reward(["p"] * 5, completions, observations=columns["observations"]) == [1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="'hypotheses'"):
        validity_reward(["p"], ["x"])


def test_shaped_format_reward_is_optional() -> None:
    task = CausalTask(nodes=3, format_reward=0.2)
    validity_reward, format_reward = task.reward_funcs()
    rewards = format_reward(["p"] * 3, ["Graph: A->B", "Graph: A->A", "nothing"])
    assert rewards == [0.2, 0.0, 0.0]
    with pytest.raises(ValueError, match="format_reward"):
        CausalTask(format_reward=2.0)


def test_outcome_key_and_behavior_hooks(task: HypoSpaceTask) -> None:
    instance = task.instances()[0]
    for hypothesis in instance.hypotheses:
        text = task.render_answer(hypothesis)
        assert task.outcome_key(text, **instance.to_json()) == hypothesis
        descriptor = task.behavior([{"role": "assistant", "content": text}])
        assert len(descriptor) == task.behavior_dims and all(0.0 <= d <= 1.0 for d in descriptor)
    assert task.outcome_key("garbage") is None and task.behavior("garbage") is None


@pytest.mark.parametrize("value", [None, 3, 2.5, b"Graph: A->B", bytearray(b"x"), ["A->B"], {"a": 1}, object()])
def test_parse_of_a_non_string_is_none(task: HypoSpaceTask, value: Any) -> None:
    assert task.parse(value) is None
    assert task.outcome_key(value) is None and task.behavior(value) is None
    (reward,) = task.reward_funcs()
    assert reward(["p"], [value], hypotheses=[list(task.instances()[0].hypotheses)]) == [0.0]


@pytest.mark.parametrize("hypothesis", ["garbage", "A->B;", "NOT(x", "1/0", "", None, 3, ["x"]])
def test_descriptor_takes_canonical_hypotheses_only(task: HypoSpaceTask, hypothesis: Any) -> None:
    if task.is_hypothesis(hypothesis):  # "" is the empty graph of the causal space
        assert all(0.0 <= d <= 1.0 for d in task.descriptor(hypothesis))
        return
    with pytest.raises(ValueError, match=f"canonical {task.domain} hypothesis"):
        task.descriptor(hypothesis)
    assert not task.is_consistent(hypothesis, task.instances()[0].observations)


def test_observations_must_be_a_list_of_lines(task: HypoSpaceTask) -> None:
    instance = task.instances()[0]
    assert task.is_consistent(instance.hypotheses[0], list(instance.observations))
    with pytest.raises(ValueError, match="list of lines"):
        task.is_consistent(instance.hypotheses[0], instance.observations[0])


def test_chat_prompt_states_rules_observations_format_and_previous(task: HypoSpaceTask) -> None:
    instance = task.instances()[-1]
    (message,) = task.prompt(instance, "chat")
    assert message["role"] == "user"
    assert task.rules() in message["content"]
    assert task.observation_block(instance.observations) in message["content"]
    assert task.format_example() in message["content"] and "Earlier proposals" not in message["content"]
    (sequential,) = task.prompt(instance, "chat", previous=[instance.hypotheses[0]] * 2)
    assert sequential["content"].count(task.render_answer(instance.hypotheses[0])) == 1


def test_base_prompt_is_few_shot_from_the_train_split(task: HypoSpaceTask) -> None:
    test = task.split("test")
    build = task.prompts_for("base")
    prompt = build(test[0])
    assert isinstance(prompt, str) and prompt.endswith(task.answer_label)
    assert prompt.count("END") == 3
    train_ids = {i.id for i in task.split("train")}
    shots = task.exemplars(test[0], task.split("train"), 3)
    assert all(ex.id in train_ids and h in ex.hypotheses for ex, h in shots)
    assert all(task.render_answer(h) in prompt for _, h in shots)


def test_train_dataset_has_the_columns_rewards_need(task: HypoSpaceTask) -> None:
    dataset = task.train_dataset("train", style="chat")
    assert set(dataset.column_names) == {"prompt", "id", "observations", "hypotheses"}
    assert len(dataset) == len(task.split("train"))
    row = dataset[0]
    (reward,) = task.reward_funcs()
    good = task.render_answer(row["hypotheses"][0])
    assert reward([row["prompt"]], [good], hypotheses=[row["hypotheses"]]) == [1.0]
    base = task.train_dataset("test", style="base", limit=4)
    assert len(base) == 2 and isinstance(base[0]["prompt"], str)
    with pytest.raises(ValueError, match="empty"):
        task.train_dataset("test", test_fraction=0.0)
    with pytest.raises(ValueError, match="prompt style"):
        task.train_dataset("train", style="instruct")


def test_instance_from_json_validates() -> None:
    with pytest.raises(ValueError, match="'hypotheses'"):
        Instance.from_json({"id": "a", "domain": "d", "params": {}, "observations": [], "hypotheses": "x"})


@pytest.mark.slow
def test_trl_grpo_trainer_calls_the_reward_with_the_dataset_columns(tiny_qwen3: Path) -> None:
    """One real GRPOTrainer step on a HypoSpace chat dataset: the reward sees chat completions and H_O."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    task = VoxelTask(grid=2, max_height=2, max_blocks=1)
    seen: list[tuple[Any, list[str]]] = []

    def validity(prompts: list, completions: list, **columns: Any) -> list[float]:
        seen.append((completions[0], sorted(columns)))
        return task.validity_reward(prompts, completions, **columns)

    args = GRPOConfig(
        output_dir=str(tiny_qwen3.parent / "grpo-hypospace"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=6,
        max_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_qwen3),
        reward_funcs=[validity],
        args=args,
        train_dataset=task.train_dataset("train"),
        processing_class=AutoTokenizer.from_pretrained(tiny_qwen3),
    )
    trainer.train()
    completion, columns = seen[0]
    assert completion[0]["role"] == "assistant"
    assert {"hypotheses", "observations", "id"} <= set(columns)


@pytest.mark.parametrize(
    ("task", "completion", "expected"),
    [
        # A base model runs on past END into an invented worked example: its label and answer are not read.
        (BooleanTask("basic", 2), " x AND y\nEND\n\nObservations (input -> output):\n(x=0, y=0) -> 0\n"
         "Expression: x OR y\nEND", "AND(x,y)"),
        (BooleanTask("basic", 2), " x OR y\nEND\n\nObservations (input -> output):\n(x=0, y=1) -> 1\nExpression:",
         "OR(x,y)"),
        (CausalTask(3), " A->B\nEND\n\nObservations:\nPerturb(A) -> A:0 B:1 C:0\nGraph: B->C\nEND", "A->B"),
        (BooleanTask("basic", 2), "\nEND\nExpression: x OR y", None),  # nothing before END
        # No voxel answer before END: the well-formed structure of the invented example after it is not read.
        (VoxelTask(2, 2, 2), "Structure:\nnot sure\nEND\n\nTop view:\n10\nStructure:\nLayer 1:\n10\n00\nEND",
         None),
    ],
)
def test_the_answer_ends_at_the_end_marker(task, completion: str, expected: str | None) -> None:
    assert task.parse(completion) == expected
