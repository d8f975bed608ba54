"""Bad input to divrl.core's public API (issue 44): a wrongly typed argument, or a NaN or inf where numbers are
expected, is a TypeError or ValueError naming the argument, or (tensor entries) a NaN result the docs state; never an
error from deep inside torch or numpy (`LinAlgError`, `IndexError`, `AttributeError`, ...). Each public function and
method is called as in tests/helpers/core_calls.py with one argument replaced by input hypothesis generates."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from core_calls import CALLS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from divrl.core import mean_pairwise_cosine_distance, vendi_score, vendi_score_of_embeddings

CASES = [(name, arg) for name, (_, kwargs) in CALLS.items() for arg in kwargs]
WRONGLY_TYPED = st.one_of(
    st.none(), st.booleans(), st.text(max_size=4), st.complex_numbers(allow_nan=False), st.builds(object),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), st.lists(st.text(max_size=3), min_size=1,
                                                                             max_size=3),
    st.lists(st.none(), min_size=1, max_size=3), st.sampled_from([math.nan, math.inf, -math.inf]),
    st.builds(lambda: torch.tensor([math.nan, 1.0])), st.builds(lambda: torch.zeros(2, 2, 2)),
)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _call_expecting_a_named_error(name: str, arg: str, value: Any) -> None:
    """Call CALLS[name] with `arg` replaced by `value`: returning is fine; raising must be TypeError/ValueError
    naming `arg` (any other error fails the test with its own traceback)."""
    function, kwargs = CALLS[name]
    try:
        function(**{**kwargs, arg: value})
    except (TypeError, ValueError) as error:
        assert arg in str(error), f"{name}({arg}={value!r}): {type(error).__name__} does not name {arg!r}: {error}"


def test_every_valid_call_runs() -> None:
    for _name, (function, kwargs) in CALLS.items():
        function(**kwargs)  # the baseline each case below spoils one argument of


@pytest.mark.parametrize(("name", "arg"), CASES, ids=[f"{name}-{arg}" for name, arg in CASES])
@SETTINGS
@given(value=WRONGLY_TYPED)
def test_a_wrongly_typed_argument_is_a_type_or_value_error_naming_it(name: str, arg: str, value: Any) -> None:
    _call_expecting_a_named_error(name, arg, value)


def _poisoned(value: Any, index: int, bad: float) -> Any:
    """`value` (a float tensor or a list of floats) with one entry replaced by `bad`; None for other values."""
    if torch.is_tensor(value) and value.is_floating_point() and value.numel():
        value = value.clone()
        value.view(-1)[index % value.numel()] = bad
        return value
    if isinstance(value, list) and value and all(isinstance(item, float) for item in value):
        return [bad if i == index % len(value) else item for i, item in enumerate(value)]
    return None


NUMERIC = [(name, arg) for name, arg in CASES if _poisoned(CALLS[name][1][arg], 0, math.nan) is not None]


@pytest.mark.parametrize(("name", "arg"), NUMERIC, ids=[f"{name}-{arg}" for name, arg in NUMERIC])
@SETTINGS
@given(index=st.integers(0, 63), bad=st.sampled_from([math.nan, math.inf, -math.inf]))
def test_a_nan_or_inf_entry_is_a_named_error_or_a_result(name: str, arg: str, index: int, bad: float) -> None:
    _call_expecting_a_named_error(name, arg, _poisoned(CALLS[name][1][arg], index, bad))


@given(rows=st.integers(1, 5), cols=st.integers(1, 5), bad=st.sampled_from([math.nan, math.inf, -math.inf]),
       seed=st.integers(0, 2**16))
@settings(max_examples=30, deadline=None)
def test_the_vendi_scores_of_non_finite_input_are_nan(rows: int, cols: int, bad: float, seed: int) -> None:
    """Documented in their docstrings: NaN, as for a similarity matrix that is not finite (was LinAlgError)."""
    x = torch.rand(rows, cols, generator=torch.Generator().manual_seed(seed))
    x[seed % rows, seed % cols] = bad
    assert math.isnan(vendi_score_of_embeddings(x))
    assert math.isnan(vendi_score(torch.full((rows, rows), bad)))
    assert math.isnan(mean_pairwise_cosine_distance(x)) or rows == 1


def test_the_messages_name_the_function_and_the_argument() -> None:
    with pytest.raises(TypeError, match=r"^group_advantages: group_size must be an integer, got str 'two'$"):
        CALLS["group_advantages"][0](**{**CALLS["group_advantages"][1], "group_size": "two"})
    with pytest.raises(TypeError, match=r"^group_advantages: group_size must be an integer, got str 'infinite'$"):
        CALLS["group_advantages"][0](**{**CALLS["group_advantages"][1], "group_size": "infinite"})  # a TypeError
    with pytest.raises(ValueError, match=r"^kl_divergence: eps must be a finite number, got nan$"):
        CALLS["kl_divergence"][0](**{**CALLS["kl_divergence"][1], "eps": math.nan})
    with pytest.raises(TypeError, match=r"^vendi_score_of_embeddings: x must be a torch.Tensor, got list"):
        vendi_score_of_embeddings([[1.0, 2.0]])
