"""Calibrator contracts: return type, theorem cited, exact-rule guarantees, bad input.

epsilon and the values are checked where they enter (core.policy.calibrate, the spec, the
laws), not by each calibrator; a calibrator refuses only laws its theorem does not cover."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pufferfish_core import calibrators as cal
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.policy import TABLE, calibrate
from pufferfish_core.spec_calibration import calibrate_spec
from pufferfish_core.vocabulary import Derivation, Rule

P = Distribution.from_points([1, 2, 4, 5], [0.4, 0.1, 0.1, 0.4])
Q = Distribution.from_points([2, 3, 4], [0.05, 0.9, 0.05])
B2, B9 = Distribution.bernoulli(0.2), Distribution.bernoulli(0.9)
ZERO = Distribution.point(0)


def all_calibrations(eps: float) -> list[Derivation]:
    return [
        cal.value_change(5, 3, eps),
        cal.value_presence(5, eps),
        cal.distribution_presence_bound(P, eps),
        cal.distribution_presence_relaxed(P, eps),
        cal.distribution_presence_bernoulli(0.2, eps),
        cal.distribution_change_thm4(P, Q, eps),
        cal.distribution_change_binary(B2, B9, eps),
        cal.distribution_change_binary_relaxed(B2, B9, ZERO, eps),
        cal.kantorovich(P, Q, eps),
        cal.exact(P, Q, eps),
    ]


def test_every_calibrator_returns_theta_and_its_theorem() -> None:
    for c in all_calibrations(0.5):
        assert isinstance(c, Derivation)
        assert isinstance(c.theta, float) and c.theta > 0
        assert c.theorem
        with pytest.raises(AttributeError):
            c.theta = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("eps", (0.0, -1.0, math.nan, math.inf))
def test_bad_epsilon_is_refused_where_it_enters(eps: float) -> None:
    calls: list[Callable[[], object]] = [
        lambda: calibrate_spec({"pair": "value_presence", "a": 1}, eps),
        *(
            (lambda k=kind, h=how, r=radii: calibrate(
                k, h, B2 if h is Rule.BINARY else P, B9 if h is Rule.BINARY else Q, eps,
                radii=r, domain=[0, 1, 2, 3, 4, 5],
            ))
            for kind, how in TABLE
            for radii in ((0.0, 0.0), (0.2, 0.1))
        ),
    ]
    for call in calls:
        with pytest.raises(PufferfishInputError) as info:
            call()
        assert info.value.field == "epsilon"


def test_binary_rules_refuse_non_bernoulli() -> None:
    calls: list[Callable[[], object]] = [
        lambda: cal.distribution_change_binary(P, B9, 1.0),
        lambda: cal.distribution_change_binary_relaxed(B2, Q, ZERO, 1.0),
    ]
    for call in calls:
        with pytest.raises(PufferfishInputError) as info:
            call()
        assert info.value.field == "distribution"


def test_relaxed_binary_refuses_rest_off_the_integers() -> None:
    rest = Distribution.from_points([0, 1.5], [0.5, 0.5])
    with pytest.raises(PufferfishInputError) as info:
        cal.distribution_change_binary_relaxed(B2, B9, rest, 1.0)
    assert info.value.field == "rest"


def test_bad_numbers_are_refused_by_the_laws() -> None:
    with pytest.raises(PufferfishInputError) as info:
        Distribution.point(math.nan)
    assert info.value.field == "a"
    with pytest.raises(PufferfishInputError) as info:
        Distribution.point(math.inf)
    assert info.value.field == "a"
    with pytest.raises(PufferfishInputError) as info:
        Distribution.bernoulli(1.5)
    assert info.value.field == "p"


def test_exact_passes_and_is_tight() -> None:
    for eps in (0.01, 0.3, 1.0, 4.0):
        theta = cal.exact(P, Q, eps).theta
        assert audit(P, Q, theta).loss <= eps
        assert audit(P, Q, theta * (1 - 1e-6)).loss > eps


def test_exact_of_point_masses_is_theorem1() -> None:
    theta = cal.exact(Distribution.point(5), Distribution.point(3), 0.25).theta
    assert theta == pytest.approx(8.0, rel=1e-9)
    assert theta >= 8.0 * (1 - 1e-15)


def test_exact_returns_zero_when_no_noise_is_needed() -> None:
    assert cal.exact(P, P, 0.1).theta == 0.0
    assert cal.exact(B2, Distribution.bernoulli(0.21), 0.2).theta == 0.0


def test_relaxed_presence_with_only_zero() -> None:
    assert cal.distribution_presence_relaxed(ZERO, 1.0).theta == 0.0
    one_magnitude = Distribution.from_points([-3, 3], [0.5, 0.5])
    assert cal.distribution_presence_relaxed(one_magnitude, 1.0).theta == pytest.approx(3.0)


def test_relaxed_binary_with_a_sparse_rest() -> None:
    rest = Distribution.from_points([0, 10**9], [0.5, 0.5])
    eps = 0.2
    theta = cal.distribution_change_binary_relaxed(B2, B9, rest, eps).theta
    assert theta == pytest.approx(1 / math.log(math.exp(eps) + math.expm1(eps) * 2 / 7))
    assert audit(B2.convolve(rest), B9.convolve(rest), theta).loss <= eps * (1 + 1e-12)
