"""user_theta / set_theta: which pairs a user has (docs/design.md) and the rules on them."""

from __future__ import annotations

import math

import pytest

from core import calibrators as cal
from core.auditor import audit
from core.distribution import Distribution
from core.errors import PufferfishInputError
from core.user_theta import RULES, PairKind, SetCalibration, UserCalibration, set_theta, user_theta

ALL = frozenset(PairKind)
ZERO = Distribution.point(0)
# A learned histogram on the declared domain 1..5; 1, 3 and 5 never reported.
HIST = Distribution.from_counts([1, 2, 3, 4, 5], [0, 3, 0, 2, 0])
P4 = Distribution.from_points([1, 2, 3, 4, 5], [0.4, 0.1, 0.0, 0.1, 0.4])
Q4 = Distribution.from_points([1, 2, 3, 4, 5], [0.0, 0.05, 0.9, 0.05, 0.0])


def test_pair_kind_values() -> None:
    assert [k.value for k in PairKind] == [
        "value_change",
        "value_presence",
        "distribution_presence",
        "distribution_change",
    ]
    assert PairKind("value_change") is PairKind.VALUE_CHANGE


def test_no_estimate_means_no_noise() -> None:
    assert user_theta(None, True, None, ALL, 0.5) == UserCalibration(0.0, 0.0, None)


@pytest.mark.parametrize("rule", RULES)
def test_value_change_uses_the_positive_support(rule: str) -> None:
    # supp = {2, 4}: |max - min| = 2 (the zero-count domain ends 1 and 5 do not count)
    calib = user_theta(HIST, True, None, frozenset({PairKind.VALUE_CHANGE}), 0.5, rule)
    assert calib.theta == pytest.approx(4.0, rel=1e-9)
    assert calib.spread == 2.0
    assert calib.binding_pair is PairKind.VALUE_CHANGE
    absent = user_theta(HIST, False, None, frozenset({PairKind.VALUE_CHANGE}), 0.5, rule)
    assert absent.theta == 0.0


@pytest.mark.parametrize("rule", RULES)
def test_value_presence_counts_for_absent_users(rule: str) -> None:
    d = Distribution.from_points([-7, 3], [0.5, 0.5])
    for present in (True, False):
        calib = user_theta(d, present, None, frozenset({PairKind.VALUE_PRESENCE}), 2.0, rule)
        assert calib.theta == pytest.approx(3.5, rel=1e-9)
        assert calib.spread == 7.0


def test_distribution_presence_by_rule() -> None:
    pairs = frozenset({PairKind.DISTRIBUTION_PRESENCE})
    eps = 0.4
    by_rule = {rule: user_theta(P4, False, None, pairs, eps, rule).theta for rule in RULES}
    assert by_rule["bound"] == pytest.approx(5 / eps)
    assert by_rule["kantorovich"] == pytest.approx(5 / eps)
    assert by_rule["relaxed"] == cal.distribution_presence_relaxed(P4, eps).theta
    assert by_rule["exact"] == cal.exact(P4, ZERO, eps).theta
    assert by_rule["exact"] <= by_rule["relaxed"] * (1 + 1e-9) < by_rule["bound"]


def test_distribution_change_skips_own_group_and_absent_users() -> None:
    pairs = frozenset({PairKind.DISTRIBUTION_CHANGE})
    refs = {"mine": ZERO.shift(100), "other": Q4}
    calib = user_theta(P4, True, "mine", pairs, 1.0, "bound", refs)
    assert calib.theta == pytest.approx(2.0)  # Theorem 4 on (P4, Q4), not the far own group
    assert calib.spread == 2.0
    assert user_theta(P4, False, "mine", pairs, 1.0, "bound", refs).theta == 0.0
    # no group: every reference counts
    assert user_theta(P4, True, None, pairs, 1.0, "bound", refs).theta == pytest.approx(99.0)


def test_distribution_change_relaxed_rule() -> None:
    pairs = frozenset({PairKind.DISTRIBUTION_CHANGE})
    b2, b9 = Distribution.bernoulli(0.2), Distribution.bernoulli(0.9)
    eps = 0.1
    got = user_theta(b2, True, "a", pairs, eps, "relaxed", {"b": b9}).theta
    assert got == pytest.approx(1 / math.log(math.exp(eps) + math.expm1(eps) * 2 / 7))
    # non-Bernoulli: Theorem 4
    assert user_theta(P4, True, "a", pairs, eps, "relaxed", {"b": Q4}).theta == pytest.approx(20)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("present", (True, False))
def test_user_theta_passes_the_audit_on_every_own_pair(rule: str, present: bool) -> None:
    eps = 0.3
    refs = {"g1": Q4, "g2": Distribution.from_points([0, 20], [0.5, 0.5])}
    calib = user_theta(P4, present, "g0", ALL, eps, rule, refs)
    own_pairs = [
        (Distribution.point(5), Distribution.point(1)),
        (Distribution.point(5), ZERO),
        (P4, ZERO),
        (P4, Q4),
        (P4, refs["g2"]),
    ]
    if not present:
        own_pairs = own_pairs[1:3]
    for a, b in own_pairs:
        assert audit(a, b, calib.theta).loss <= eps * (1 + 1e-9)
    if rule == "exact":
        assert calib.theta == max(cal.exact(a, b, eps).theta for a, b in own_pairs)
    # (P4, g2) plan: 4 -> 20 and 5 -> 20, spread 16 by hand
    assert calib.spread == (16.0 if present else 5.0)


def test_binding_pair() -> None:
    calib = user_theta(HIST, True, None, ALL, 1.0, "bound")
    assert calib.binding_pair is PairKind.VALUE_PRESENCE  # 4 beats value change (2)
    assert calib.theta == pytest.approx(4.0)


def test_set_theta() -> None:
    users = {
        "u2": UserCalibration(3.0, 3.0, PairKind.VALUE_PRESENCE),
        "u1": UserCalibration(3.0, 1.0, PairKind.DISTRIBUTION_CHANGE),
        "u3": UserCalibration(1.0, 9.0, PairKind.VALUE_CHANGE),
    }
    assert set_theta(users) == SetCalibration(3.0, "u1", PairKind.DISTRIBUTION_CHANGE, 9.0)
    assert set_theta({}) == SetCalibration(0.0, None, None, 0.0)


def test_bad_input() -> None:
    with pytest.raises(PufferfishInputError) as info:
        user_theta(P4, True, None, ALL, 0.0)
    assert info.value.field == "epsilon"
    with pytest.raises(PufferfishInputError) as info:
        user_theta(P4, True, None, ALL, 1.0, rule="magic")
    assert info.value.field == "rule"
    with pytest.raises(PufferfishInputError) as info:
        user_theta(P4, True, None, frozenset({"nope"}), 1.0)  # type: ignore[arg-type]
    assert info.value.field == "pairs"
    # plain strings are accepted
    assert user_theta(P4, True, None, frozenset({"value_presence"}), 1.0).theta > 0  # type: ignore[arg-type]
