"""The molecule task object (divrl.task protocol) and its offline prompts and reference data."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rdkit import Chem
from rdkit.Chem import Crippen, Descriptors

from divrl.task import Task, build_task, has_hook
from divrl.tasks.molecules import DiversityFilter, MoleculeTask
from divrl.tasks.molecules.data import (
    base_prompt,
    build_dataset,
    build_rows,
    few_shot_pool,
    reference_smiles,
    shipped_smiles,
)
from divrl.tasks.molecules.rewards import MPO

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"


def test_task_implements_the_protocol_hooks() -> None:
    task = MoleculeTask()
    assert isinstance(task, Task) and task.name == "molecules"
    assert has_hook(task, "outcome_key") and has_hook(task, "behavior") and task.behavior_dims == 2


def test_reward_reads_strings_and_chat_completions() -> None:
    task = MoleculeTask()
    (reward,) = task.reward_funcs()
    logged: dict[str, float] = {}
    completions = [
        f" {ASPIRIN}\nSMILES: CCO",
        [{"role": "assistant", "content": f"```\n{ASPIRIN}\n```"}],
        "I cannot answer that.",
    ]
    scores = reward(prompts=["p"] * 3, completions=completions, few_shot=[[]] * 3, log_metric=logged.__setitem__)
    assert scores == [MPO()(ASPIRIN), MPO()(ASPIRIN), 0.0]
    assert logged["molecules/validity"] == pytest.approx(2 / 3)
    assert logged["molecules/oracle_calls"] == 1.0 and logged["molecules/cache_hit_rate"] == 0.5


def test_outcome_key_is_canonical_smiles() -> None:
    task = MoleculeTask()
    assert task.outcome_key("OC(=O)c1ccccc1OC(C)=O") == task.outcome_key(ASPIRIN) == Chem.CanonSmiles(ASPIRIN)
    assert task.outcome_key("no molecule", prompt="p") is None


def test_behavior_is_normalised_molwt_and_logp() -> None:
    task = MoleculeTask(molwt_range=(0.0, 400.0), logp_range=(-5.0, 5.0))
    mol = Chem.MolFromSmiles(ASPIRIN)
    expected = (Descriptors.MolWt(mol) / 400.0, (Crippen.MolLogP(mol) + 5.0) / 10.0)
    assert task.behavior(ASPIRIN) == pytest.approx(expected)
    assert task.behavior("C" * 60) == pytest.approx((1.0, 1.0))  # clipped at the top of both ranges
    assert task.behavior("nothing") is None
    with pytest.raises(ValueError, match="logp_range"):
        MoleculeTask(logp_range=(1.0, 1.0))


def test_diversity_filter_wraps_the_reward_and_everything_pickles() -> None:
    task = MoleculeTask(diversity_filter=DiversityFilter(bucket_size=1, min_score=0.0), sanity=False)  # small ones
    (reward,) = task.reward_funcs()
    assert reward.__name__ == "molecule_mpo_df"
    scores = reward(prompts=["p", "p"], completions=["Cc1ccccc1", "CCc1ccccc1"])
    assert scores[0] > 0 and scores[1] == 0.0  # second benzene overflows the bucket of size 1
    clone = pickle.loads(pickle.dumps(reward))
    assert clone(prompts=["p"], completions=["Oc1ccccc1"]) == [0.0]  # the copy carries the filter's memory


def test_diversity_filter_from_task_args_dict() -> None:
    """Recipes pass task_args from YAML, so the filter arrives as a dict of DiversityFilter arguments."""
    task = build_task(
        "molecules", diversity_filter={"bucket_size": 1, "min_score": 0.0, "scaffold": "generic"}, sanity=False
    )
    assert isinstance(task.diversity_filter, DiversityFilter)
    assert task.diversity_filter.config() == {
        "scaffold": "generic",
        "bucket_size": 1,
        "min_score": 0.0,
        "repeat_penalty": 0.0,
    }
    (reward,) = task.reward_funcs()
    assert reward.__name__ == "molecule_mpo_df"
    scores = reward(prompts=["p", "p"], completions=["Cc1ccccc1", "Cc1ccccn1"])  # one generic scaffold
    assert scores[0] > 0 and scores[1] == 0.0


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"bucket": 10}, r"unknown diversity_filter argument\(s\) \['bucket'\]"),
        ({"bucket_size": 0}, "bucket_size must be a positive integer"),
        ({"min_score": float("nan")}, "min_score must be a finite number"),
        ("murcko", "diversity_filter must be a DiversityFilter or a dict"),
        (True, "diversity_filter must be a DiversityFilter or a dict"),
    ],
)
def test_bad_diversity_filter_task_args_are_clear_errors(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_task("molecules", diversity_filter=spec)


def _trained_task() -> MoleculeTask:
    """A task with a filter that has seen a batch: cache, oracle history, counters and buckets all non-empty."""
    task = MoleculeTask(diversity_filter={"bucket_size": 2, "min_score": 0.0}, sanity=False)
    task.reward_funcs()[0](prompts=["p"] * 4, completions=[ASPIRIN, "CCO", "Cc1ccccc1", "OCC"])
    return task


def test_task_state_round_trips_through_json() -> None:
    task = _trained_task()
    state = json.loads(json.dumps(task.state_dict()))
    assert set(state) == {"mpo", "scorer", "diversity_filter"}
    restored = MoleculeTask(diversity_filter={"bucket_size": 2, "min_score": 0.0}, sanity=False)
    restored.load_state_dict(state)
    assert restored.scorer.history == task.scorer.history and restored.scorer.cache == task.scorer.cache
    assert (restored.scorer.hits, restored.scorer.misses) == (task.scorer.hits, task.scorer.misses) == (1, 3)
    assert restored.diversity_filter.memory == task.diversity_filter.memory
    assert restored.diversity_filter.buckets == task.diversity_filter.buckets == {"c1ccccc1": 2, "": 1}
    # The restored task continues exactly where the original is: same rewards, no new oracle calls for repeats.
    batch = ["c1ccccc1O", "CCO", "CCN"]
    assert restored.reward_funcs()[0](prompts=["p"] * 3, completions=batch) == task.reward_funcs()[0](
        prompts=["p"] * 3, completions=batch
    )
    assert restored.scorer.history == task.scorer.history and len(task.scorer.history) == 5


def test_task_state_from_another_setup_is_refused() -> None:
    state = _trained_task().state_dict()
    with pytest.raises(ValueError, match="disagree"):
        MoleculeTask(sanity=False).load_state_dict(state)
    with pytest.raises(ValueError, match="cached rewards come from objective"):  # the chemistry gate changes rewards
        MoleculeTask(diversity_filter={"bucket_size": 2, "min_score": 0.0}).load_state_dict(state)
    with pytest.raises(ValueError, match="cached rewards come from objective"):
        MoleculeTask(["qed"], diversity_filter={"bucket_size": 2, "min_score": 0.0}).load_state_dict(state)
    with pytest.raises(ValueError, match="cached rewards come from objective"):
        MoleculeTask(hbd_threshold=5, diversity_filter={"bucket_size": 2, "min_score": 0.0}).load_state_dict(state)
    with pytest.raises(ValueError, match="saved with"):
        MoleculeTask(diversity_filter={"bucket_size": 3, "min_score": 0.0}, sanity=False).load_state_dict(state)
    for junk in ({}, {"scorer": state["scorer"]}, ["mpo", "scorer"], None):
        with pytest.raises(ValueError, match="not a MoleculeTask state dict"):
            MoleculeTask().load_state_dict(junk)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=150), st.lists(st.dictionaries(st.sampled_from(["role", "content"]), st.text()))))
def test_hooks_never_raise_on_arbitrary_completions(completion: object) -> None:
    task = MoleculeTask()
    (score,) = task.reward_funcs()[0](prompts=["p"], completions=[completion])
    assert 0.0 <= score <= 1.0
    key = task.outcome_key(completion)
    descriptor = task.behavior(completion)
    assert (key is None) == (descriptor is None)
    assert descriptor is None or all(0.0 <= d <= 1.0 for d in descriptor)


def test_shipped_smiles_and_reference_set_are_offline_and_deterministic() -> None:
    chembl = shipped_smiles("chembl")
    assert len(chembl) > 900 and all(Chem.CanonSmiles(s) == s for s in chembl[:50])
    reference = reference_smiles(size=200, seed=3)
    assert reference == reference_smiles(size=200, seed=3) != reference_smiles(size=200, seed=4)
    assert reference == sorted(reference) and len(set(reference)) == 200
    assert set(chembl) <= set(reference_smiles())
    with pytest.raises(ValueError, match="unknown SMILES source"):
        shipped_smiles("zinc")
    with pytest.raises(ValueError, match="reference size"):
        reference_smiles(size=0)


def test_prompts_for_base_and_chat_models() -> None:
    rows = build_rows(4, style="base", n_shots=3, seed=7)
    assert rows == build_rows(4, style="base", n_shots=3, seed=7)
    assert len({r["prompt"] for r in rows}) == 4  # each prompt draws its own examples
    pool = set(few_shot_pool())
    for row in rows:
        assert set(row["few_shot"]) <= pool and row["prompt"] == base_prompt(row["few_shot"])
        assert row["prompt"].endswith("SMILES:") and row["prompt"].count("SMILES: ") == 3
    chat = build_rows(1, style="chat", n_shots=2, seed=0)[0]["prompt"]
    assert [m["role"] for m in chat] == ["system", "user"]
    assert all(s in chat[1]["content"] for s in build_rows(1, style="chat", n_shots=2, seed=0)[0]["few_shot"])
    dataset = build_dataset(3, style="chat", seed=1)
    assert dataset.column_names == ["prompt", "few_shot"] and len(dataset) == 3
    with pytest.raises(ValueError, match="prompt style"):
        build_rows(1, style="instruct")


def test_lazy_package_exports_resolve() -> None:
    import divrl.tasks.molecules as molecules

    for name in molecules.__all__:
        assert getattr(molecules, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute"):
        molecules.not_a_name  # noqa: B018
