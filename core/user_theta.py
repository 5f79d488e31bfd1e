"""What the stream calls: one user's noise scale, then the release's (the max over users).

Which pairs a user has (docs/design.md, "Which pairs a user has"):
- value_change S_{a,b}: every a != b in supp(P_i); binding pair (max, min). 0 when absent.
- value_presence S_{a,perp}: every a in supp(P_i) vs absent; binding a = argmax |a|.
- distribution_presence S_{P,perp}: (P_i, delta_0).
- distribution_change S_{P,Q}: (P_i, Q_h) for every reference Q_h of another group h. 0 when
  absent.
A user with no estimate (dist is None) has theta 0.

Rules: "exact" (the user-local exact theta of each own pair), "kantorovich" (Proposition 1
on the own pair), "bound" (Thm 1 / Thm 2 / Thm 3 max|t| / Thm 4), "relaxed" (Thm 1 / Thm 2
for value pairs, Thm 3 relaxed for presence, the corrected relaxed binary Lemma for two
Bernoulli laws and Thm 4 otherwise). The corrected Lemma's min psi is attained at the end of
the alphabet of X whatever the rest law is (psi = p/(q-p) or (1-p)/(p-q)), so it is applied
with the rest delta_0 and stays valid for every population.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from core import _validate
from core import calibrators as cal
from core.distribution import Distribution, point_zero
from core.errors import PufferfishInputError
from core.kantorovich import plan_spread


class PairKind(StrEnum):
    VALUE_CHANGE = "value_change"
    VALUE_PRESENCE = "value_presence"
    DISTRIBUTION_PRESENCE = "distribution_presence"
    DISTRIBUTION_CHANGE = "distribution_change"


RULES = ("exact", "kantorovich", "bound", "relaxed")
_ORDER = tuple(PairKind)


@dataclass(frozen=True, slots=True)
class UserCalibration:
    """theta = max over the user's pairs; spread = max Kantorovich sup|x - x'| over them."""

    theta: float
    spread: float
    binding_pair: PairKind | None


@dataclass(frozen=True, slots=True)
class SetCalibration:
    """The released theta (max over users), who binds it, and the max spread (composition)."""

    theta: float
    binding_user: str | None
    binding_pair: PairKind | None
    spread: float = 0.0


_NONE = UserCalibration(theta=0.0, spread=0.0, binding_pair=None)


def user_theta(
    dist: Distribution | None,
    present: bool,
    group: str | None,
    pairs: frozenset[PairKind],
    eps: float,
    rule: str = "exact",
    references: Mapping[str, Distribution] = {},  # noqa: B006 - read only
) -> UserCalibration:
    """Noise scale needed for one user's secret pairs (see the module docstring)."""
    e = _validate.epsilon(eps)
    if rule not in RULES:
        raise PufferfishInputError("rule", f"must be one of {', '.join(RULES)}, got {rule!r}")
    kinds = _pair_kinds(pairs)
    if dist is None:
        return _NONE
    theta, spread, binding = 0.0, 0.0, None
    for kind in _ORDER:
        if kind not in kinds:
            continue
        for a, b, calibrate in _own_pairs(kind, dist, present, group, references, rule):
            pair_spread = plan_spread(a, b)
            pair_theta = calibrate(a, b, e, pair_spread)
            spread = max(spread, pair_spread)
            if pair_theta > theta:
                theta, binding = pair_theta, kind
    return UserCalibration(theta=theta, spread=spread, binding_pair=binding)


def set_theta(users: Mapping[str, UserCalibration]) -> SetCalibration:
    """theta of a release: the max over users (ties go to the smallest user id)."""
    theta, who, pair, spread = 0.0, None, None, 0.0
    for user_id in sorted(users):
        calib = users[user_id]
        spread = max(spread, calib.spread)
        if calib.theta > theta:
            theta, who, pair = calib.theta, user_id, calib.binding_pair
    return SetCalibration(theta=theta, binding_user=who, binding_pair=pair, spread=spread)


# (a, b, eps, plan_spread(a, b)) -> theta
Calibrate = Callable[[Distribution, Distribution, float, float], float]


def _own_pairs(
    kind: PairKind,
    dist: Distribution,
    present: bool,
    group: str | None,
    references: Mapping[str, Distribution],
    rule: str,
) -> list[tuple[Distribution, Distribution, Calibrate]]:
    support = np.asarray(dist.positive_support())
    if kind is PairKind.VALUE_CHANGE:
        if not present or support.size < 2:
            return []
        pair = (Distribution.point(float(support.max())), Distribution.point(float(support.min())))
        return [(*pair, _value_rule(rule))]
    if kind is PairKind.VALUE_PRESENCE:
        top = float(support[np.argmax(np.abs(support))])
        if top == 0.0:
            return []
        return [(Distribution.point(top), point_zero(), _value_rule(rule))]
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return [(dist, point_zero(), _presence_rule(rule))]
    if not present:
        return []
    return [(dist, q, _change_rule(rule)) for h, q in sorted(references.items()) if h != group]


def _exact(a: Distribution, b: Distribution, e: float, spread: float) -> float:
    return cal.exact_theta(a, b, e, spread)


def _kantorovich(a: Distribution, b: Distribution, e: float, spread: float) -> float:
    return spread / e  # Proposition 1 on the own pair


def _value_rule(rule: str) -> Calibrate:
    # Thm 1 on (d_a, d_b) and Thm 2 on (d_a, d_0) are both |a - b| / eps.
    if rule == "exact":
        return _exact
    return lambda a, b, e, _spread: cal.value_change(a.support[0], b.support[0], e).theta


def _presence_rule(rule: str) -> Calibrate:
    if rule == "exact":
        return _exact
    if rule == "kantorovich":
        return _kantorovich
    if rule == "bound":
        return lambda a, b, e, _spread: cal.distribution_presence_bound(a, e).theta
    return lambda a, b, e, _spread: cal.distribution_presence_relaxed(a, e).theta


def _change_rule(rule: str) -> Calibrate:
    if rule == "exact":
        return _exact
    if rule == "kantorovich":
        return _kantorovich
    if rule == "bound":
        return lambda a, b, e, _spread: cal.distribution_change_thm4(a, b, e).theta
    return _relaxed_change


def _relaxed_change(a: Distribution, b: Distribution, e: float, _spread: float) -> float:
    if a.is_bernoulli() and b.is_bernoulli():
        return cal.distribution_change_binary_relaxed(a, b, point_zero(), e).theta
    return cal.distribution_change_thm4(a, b, e).theta


def _pair_kinds(pairs: object) -> frozenset[PairKind]:
    if isinstance(pairs, str) or not isinstance(pairs, frozenset | set | list | tuple):
        raise PufferfishInputError("pairs", "must be a set of pair kinds")
    try:
        return frozenset(PairKind(p) for p in pairs)
    except ValueError as exc:
        names = ", ".join(k.value for k in PairKind)
        raise PufferfishInputError("pairs", f"unknown pair kind; expected {names}") from exc
