"""Budget accountant (core/budget.py) and the composition claim behind its charge."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from scipy import optimize
from scipy.special import logsumexp

from pufferfish_core.budget import Accountant, BudgetExhausted, composition_charge
from pufferfish_core.errors import PufferfishInputError


def test_refuses_past_total_with_typed_error() -> None:
    accountant = Accountant(1.0)
    accountant.spend(0.75)
    with pytest.raises(BudgetExhausted) as info:
        accountant.spend(0.5)
    assert info.value.requested == 0.5
    assert info.value.remaining == pytest.approx(0.25)
    assert accountant.spent == 0.75 and accountant.releases == 1  # refusal records nothing


def test_exact_boundary_ten_tenths_fill_one() -> None:
    accountant = Accountant(1.0)
    for _ in range(10):
        assert accountant.can_spend(0.1)
        accountant.spend(0.1)
    assert accountant.remaining == 0.0
    assert accountant.spent == 1.0
    assert not accountant.can_spend(0.1)
    assert not accountant.can_spend(1e-300)
    with pytest.raises(BudgetExhausted):
        accountant.spend(0.1)
    assert accountant.releases == 10


def test_thirds_do_not_drift_over() -> None:
    accountant = Accountant(1.0)
    for _ in range(3):
        accountant.spend(1 / 3)
    assert accountant.spent <= 1.0


def test_infinite_charge_is_a_refusal() -> None:
    accountant = Accountant(5.0)
    assert not accountant.can_spend(math.inf)
    with pytest.raises(BudgetExhausted):
        accountant.spend(math.inf)


@pytest.mark.parametrize("eps", [0.0, -0.1, math.nan, True, "0.1"])
def test_invalid_charge_is_an_input_error(eps: Any) -> None:
    with pytest.raises(PufferfishInputError):
        Accountant(1.0).spend(eps)


@pytest.mark.parametrize("total", [-1.0, math.nan, math.inf, "1"])
def test_invalid_total(total: Any) -> None:
    with pytest.raises(PufferfishInputError):
        Accountant(total)


def test_round_trip_through_json() -> None:
    accountant = Accountant(1.0)
    for charge in (0.1, 0.25, 0.1):
        accountant.spend(charge)
    text = json.dumps(accountant.to_dict(), allow_nan=False)
    restored = Accountant.from_dict(json.loads(text))
    assert restored.to_dict() == accountant.to_dict()
    assert json.loads(text)["spent_exact"] == "9/20"
    restored.spend(0.55)  # exactly fills the total
    with pytest.raises(BudgetExhausted):
        restored.spend(1e-9)


def _valid_dict() -> dict[str, Any]:
    accountant = Accountant(1.0)
    accountant.spend(0.25)
    accountant.spend(0.5)
    return accountant.to_dict()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"total": -1.0}, "total"),
        ({"total": math.nan}, "total"),
        ({"total": 0.5, "total_exact": "1/2"}, "spent"),  # spent 0.75 > total 0.5
        ({"spent": math.nan}, "spent"),
        ({"spent": 0.7}, "spent"),
        ({"spent_exact": "1/2"}, "spent_exact"),
        ({"spent_exact": "3/0"}, "spent_exact"),
        ({"spent_exact": "-3/4"}, "spent_exact"),
        ({"spent_exact": 0.75}, "spent_exact"),
        ({"total_exact": "2/1"}, "total_exact"),
        ({"releases": 3}, "releases"),
        ({"releases": "2"}, "releases"),
        ({"charges": [0.25, -0.5]}, "charges"),
        ({"charges": [0.25, math.nan]}, "charges"),
        ({"charges": "0.25,0.5"}, "charges"),
    ],
)
def test_corrupt_dicts_are_rejected(change: dict[str, Any], field: str) -> None:
    data = _valid_dict()
    data.update(change)
    with pytest.raises(PufferfishInputError) as info:
        Accountant.from_dict(data)
    assert info.value.field == field


def test_missing_key_and_non_mapping_are_rejected() -> None:
    data = _valid_dict()
    del data["charges"]
    with pytest.raises(PufferfishInputError):
        Accountant.from_dict(data)
    with pytest.raises(PufferfishInputError):
        Accountant.from_dict([1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("spread", "theta", "epsilon", "expected"),
    [
        (2.0, 4.0, 0.5, 0.5),  # value pair at the Thm 1 theta: charge = epsilon
        (5.0, 4.0, 1.0, 1.25),  # exact rule below the pointwise theta: charge > epsilon
        (0.0, 0.0, 0.3, 0.3),  # nothing to hide, no noise
        (1.0, 0.0, 0.3, math.inf),  # no noise but something to hide: refuse
        (1.0, math.inf, 0.3, 0.3),
    ],
)
def test_composition_charge(spread: float, theta: float, epsilon: float, expected: float) -> None:
    assert composition_charge(spread, theta, epsilon) == expected


@pytest.mark.parametrize(
    ("spread", "theta", "epsilon"),
    [(-1.0, 1.0, 1.0), (math.nan, 1.0, 1.0), (1.0, -1.0, 1.0), (1.0, math.nan, 1.0),
     (1.0, 1.0, 0.0), (1.0, 1.0, math.inf)],
)
def test_composition_charge_rejects_bad_input(spread: float, theta: float, epsilon: float) -> None:
    with pytest.raises(PufferfishInputError):
        composition_charge(spread, theta, epsilon)


# --- the composition claim, checked numerically without the code under test ---------------
SUPPORT = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
PROBS = np.array([0.4, 0.1, 0.0, 0.1, 0.4])
EPS = 1.0


def _exact_single_theta() -> float:
    """Exact theta of (P, delta_0) for one release.

    For y >= 5 the ratio P/delta_0 is sum P(x) e^{x/theta} (its sup, since y - |y-x| <= x);
    the reverse sup is 1/sum P(x) e^{-x/theta} <= e^{E[x]/theta}, which is smaller (Jensen),
    so the forward tail binds: solve log sum P e^{x/theta} = eps.
    """
    return float(
        optimize.brentq(lambda th: math.log(np.dot(PROBS, np.exp(SUPPORT / th))) - EPS, 0.5, 100)
    )


def _grid_loss(theta: float, releases: int, ys: np.ndarray) -> float:
    """Two-sided sup over a dense grid of outputs of |log P(y|P)/P(y|delta_0)| (persistent x)."""
    mesh = np.stack(np.meshgrid(*([ys] * releases), indexing="ij"), axis=-1).reshape(-1, releases)
    distance_p = np.abs(mesh[:, None, :] - SUPPORT[None, :, None]).sum(axis=2)  # (points, x)
    log_p = logsumexp(-distance_p / theta, b=PROBS, axis=1)
    log_delta0 = -np.abs(mesh).sum(axis=1) / theta
    return float(np.max(np.abs(log_p - log_delta0)))


def test_exact_rule_does_not_compose_linearly_but_the_charge_does() -> None:
    theta = _exact_single_theta()
    ys = np.arange(-6.0, 12.0 + 1e-9, 0.05)
    one = _grid_loss(theta, 1, ys)
    assert one == pytest.approx(EPS, abs=1e-9)  # theta really is the exact 1-release theta

    two = _grid_loss(theta, 2, ys)
    analytic_tail = math.log(np.dot(PROBS, np.exp(2 * SUPPORT / theta)))
    assert two == pytest.approx(analytic_tail, abs=1e-9)
    assert two > 2 * EPS + 0.1  # the naive T * eps accounting under-counts (here by ~0.3)

    charge = composition_charge(5.0, theta, EPS)  # spread of (P, delta_0) is max|x| = 5
    assert charge == pytest.approx(5.0 / theta)
    assert two <= 2 * charge
