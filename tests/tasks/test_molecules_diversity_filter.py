"""REINVENT-style scaffold diversity filter: buckets, minimum score, repeats, wrapping, checkpoints."""

from __future__ import annotations

import json

import pytest
from rdkit import Chem

from divrl.tasks.molecules.diversity_filter import DiversityFilter, scaffold_of

# Five distinct molecules on the benzene scaffold, two on pyridine.
BENZENES = ["Cc1ccccc1", "CCc1ccccc1", "Oc1ccccc1", "Nc1ccccc1", "Clc1ccccc1"]
PYRIDINES = ["Cc1ccccn1", "CCc1ccccn1"]


def test_scaffolds_murcko_and_generic() -> None:
    mol = Chem.MolFromSmiles("CCc1ccccn1")
    assert scaffold_of(mol, "murcko") == "c1ccncc1"
    assert scaffold_of(mol, "generic") == "C1CCCCC1"
    assert scaffold_of(Chem.MolFromSmiles("CCCC"), "murcko") == ""  # acyclic molecules share ""


def test_bucket_overflow_and_repeats_score_zero() -> None:
    df = DiversityFilter(bucket_size=3, min_score=0.5)
    assert df(BENZENES[:3], [0.9, 0.8, 0.7]) == [0.9, 0.8, 0.7]  # bucket holds 3: still full score
    assert df(BENZENES[3:] + PYRIDINES, [0.9, 0.9, 0.6, 0.6]) == [0.0, 0.0, 0.6, 0.6]  # 4th and 5th: 0
    assert df(["c1ccccc1C", "CCc1ccccn1"], [0.9, 0.9]) == [0.0, 0.0]  # exact repeats (any spelling)
    assert df.buckets == {"c1ccccc1": 5, "c1ccncc1": 2}


def test_low_scores_are_not_memorised_and_invalid_pass_through() -> None:
    df = DiversityFilter(bucket_size=1, min_score=0.5)
    assert df(BENZENES[:3], [0.1, 0.2, 0.3]) == [0.1, 0.2, 0.3]
    assert df.buckets == {} and df.memory == set()
    assert df([None, "C1CC", BENZENES[0]], [0.0, 0.0, None]) == [0.0, 0.0, None]


def test_generic_scaffolds_merge_pyridine_and_benzene() -> None:
    df = DiversityFilter(scaffold="generic", bucket_size=5, min_score=0.0)
    assert df(BENZENES + PYRIDINES, [1.0] * 7) == [1.0] * 5 + [0.0, 0.0]


def test_repeat_penalty_is_a_multiplier() -> None:
    df = DiversityFilter(bucket_size=10, min_score=0.0, repeat_penalty=0.5)
    assert df(["CCO", "OCC", "OCC"], [0.8, 0.8, 0.8]) == [0.8, 0.4, 0.4]
    assert df.buckets == {"": 1}  # repeats are not counted again


def test_wrap_filters_a_trl_reward_function() -> None:
    def constant(prompts: list, completions: list, **kwargs: object) -> list[float]:
        return [0.9] * len(completions)

    logged: dict[str, float] = {}
    wrapped = DiversityFilter(bucket_size=1, min_score=0.5).wrap(constant)
    assert wrapped.__name__ == "constant_df"
    completions = ["Cc1ccccc1", [{"role": "assistant", "content": "CCc1ccccc1"}], "no molecule"]
    assert wrapped(prompts=["p"] * 3, completions=completions, log_metric=logged.__setitem__) == [0.9, 0.0, 0.9]
    assert logged == {"diversity_filter/penalised_fraction": pytest.approx(1 / 3), "diversity_filter/scaffolds": 1.0}


def test_state_dict_round_trip_is_json_and_refuses_other_configs() -> None:
    df = DiversityFilter(bucket_size=2, min_score=0.5)
    df(BENZENES[:3] + PYRIDINES[:1], [0.9] * 4)
    state = json.loads(json.dumps(df.state_dict()))
    restored = DiversityFilter(bucket_size=2, min_score=0.5)
    restored.load_state_dict(state)
    assert restored.buckets == df.buckets and restored.memory == df.memory
    assert restored(PYRIDINES[1:], [0.9]) == df(PYRIDINES[1:], [0.9]) == [0.9]
    with pytest.raises(ValueError, match="saved with"):
        DiversityFilter(bucket_size=3, min_score=0.5).load_state_dict(state)
    with pytest.raises(ValueError, match="not a DiversityFilter state dict"):
        restored.load_state_dict({"buckets": {}})
    with pytest.raises(ValueError, match="malformed DiversityFilter state dict"):
        restored.load_state_dict({**state, "buckets": ["c1ccccc1"]})
    assert restored.buckets == df.buckets  # a refused state leaves the filter as it was


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scaffold": "bm"}, "scaffold must be one of"),
        ({"bucket_size": 0}, "bucket_size must be a positive integer"),
        ({"bucket_size": 2.5}, "bucket_size must be a positive integer"),
        ({"bucket_size": True}, "bucket_size must be a positive integer"),
        ({"min_score": float("nan")}, "min_score must be a finite number"),
        ({"min_score": float("inf")}, "min_score must be a finite number"),
        ({"min_score": "0.5"}, "min_score must be a finite number"),
        ({"min_score": None}, "min_score must be a finite number"),
        ({"repeat_penalty": 2}, "repeat_penalty"),
        ({"repeat_penalty": float("nan")}, "repeat_penalty"),
        ({"repeat_penalty": "0"}, "repeat_penalty"),
    ],
)
def test_misconfiguration_is_a_clear_error(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DiversityFilter(**kwargs)


def test_numpy_numbers_are_accepted_and_stored_as_plain_json_numbers() -> None:
    import numpy as np

    config = DiversityFilter(bucket_size=np.int64(2), min_score=np.float32(0.5)).config()
    assert json.loads(json.dumps(config)) == {
        "scaffold": "murcko",
        "bucket_size": 2,
        "min_score": 0.5,
        "repeat_penalty": 0.0,
    }
