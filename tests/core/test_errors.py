"""One root for core's exceptions: PufferfishError; bad input stays a ValueError, the exact
search's numerical failure an ArithmeticError, so existing handlers keep catching them."""

from __future__ import annotations

import pickle

import pytest

from pufferfish_core.budget import Accountant, BudgetExhausted
from pufferfish_core.errors import PufferfishError, PufferfishInputError
from pufferfish_core.exact_search import ExactSearchFailed


def test_every_core_exception_derives_from_the_root() -> None:
    assert issubclass(PufferfishInputError, PufferfishError)
    assert issubclass(PufferfishInputError, ValueError)
    assert issubclass(BudgetExhausted, PufferfishError)
    assert issubclass(ExactSearchFailed, PufferfishError)
    assert issubclass(ExactSearchFailed, ArithmeticError)


def test_a_refused_release_is_caught_at_the_root() -> None:
    accountant = Accountant(1.0)
    with pytest.raises(PufferfishError) as info:
        accountant.spend(2.0)
    assert isinstance(info.value, BudgetExhausted)
    assert (info.value.requested, info.value.remaining) == (2.0, 1.0)


def test_input_error_names_its_field_and_pickles() -> None:
    err = PufferfishInputError("epsilon", "must be > 0, got 0.0")
    assert str(err) == "epsilon: must be > 0, got 0.0"
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), back.field, back.message) == (PufferfishInputError, err.field, err.message)
