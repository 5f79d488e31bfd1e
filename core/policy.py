"""The (pair, rule) -> theorem table, and ``calibrate``: the one way to a noise scale.

``calibrate`` validates epsilon, the rule and the radii where they enter, looks the (pair,
rule) entry up — ``TABLE`` for laws known exactly, ``ROBUST`` for laws known up to an L1 ball
— and builds the ``Calibration`` from the (theta, theorem) the entry returns. Nothing else
dispatches on a pair or rule name; the names themselves are core/vocabulary.py.

Each entry cites its theorem (core/calibrators.py). That applying it to a user's *own* pair is
valid for every population is docs/privacy.md, "User-local calibration" (the exact rule:
docs/errata.md, "A user-local exact calibration"); the robust entries are docs/privacy.md,
"Robust calibration over an L1 ball".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pufferfish_core import calibrators, robust, validation
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.vocabulary import (
    PRIORS,
    Calibration,
    Derivation,
    PairKind,
    Rule,
    applicable,
    rule,
)

# (first prior, second prior, epsilon, law of the rest of X) -> (theta, theorem)
Calibrator = Callable[[Distribution, Distribution, float, Distribution], Derivation]


def _exact(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.exact(a, b, e)


def _kantorovich(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.kantorovich(a, b, e)


def _point(law: Distribution, field: str) -> float:
    """The value of a point mass (value pairs are pairs of point masses)."""
    return validation.point_mass(law.positive_support(), field)


def _thm1(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.value_change(_point(a, "a"), _point(b, "b"), e)


def _thm2(a: Distribution, _b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.value_presence(_point(a, "a"), e)


def _thm3_bound(a: Distribution, _b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.distribution_presence_bound(a, e)


def _thm3_relaxed(a: Distribution, _b: Distribution, e: float, _r: Distribution) -> Derivation:
    """Theorem 3 relaxed: its closed form for a Bernoulli law, else Brent's root."""
    if a.is_bernoulli():
        return calibrators.distribution_presence_bernoulli(a.bernoulli_p(), e)
    return calibrators.distribution_presence_relaxed(a, e)


def _thm4(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.distribution_change_thm4(a, b, e)


def _binary(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Derivation:
    return calibrators.distribution_change_binary(a, b, e)


def _binary_relaxed(a: Distribution, b: Distribution, e: float, rest: Distribution) -> Derivation:
    """Corrected relaxed binary Lemma (docs/errata.md 1-3) for two Bernoulli laws, else Thm 4.

    Its minimum psi sits just past the end of the rest's support whatever the rest is, so with
    the rest delta_0 it is valid for every population (docs/privacy.md, "User-local
    calibration").
    """
    if a.is_bernoulli() and b.is_bernoulli():
        return calibrators.distribution_change_binary_relaxed(a, b, rest, e)
    return calibrators.distribution_change_thm4(a, b, e)


_GENERIC: dict[Rule, Calibrator] = {Rule.EXACT: _exact, Rule.KANTOROVICH: _kantorovich}

# Keys: exactly the (pair, rule) combinations of core.vocabulary.rules_for.
TABLE: dict[tuple[PairKind, Rule], Calibrator] = {
    **{(kind, how): fn for kind in PairKind for how, fn in _GENERIC.items()},
    (PairKind.VALUE_CHANGE, Rule.BOUND): _thm1,
    (PairKind.VALUE_CHANGE, Rule.RELAXED): _thm1,  # Theorem 1 is tight already
    (PairKind.VALUE_PRESENCE, Rule.BOUND): _thm2,
    (PairKind.VALUE_PRESENCE, Rule.RELAXED): _thm2,  # Theorem 2 is tight already
    (PairKind.DISTRIBUTION_PRESENCE, Rule.BOUND): _thm3_bound,
    (PairKind.DISTRIBUTION_PRESENCE, Rule.RELAXED): _thm3_relaxed,
    (PairKind.DISTRIBUTION_CHANGE, Rule.BOUND): _thm4,
    (PairKind.DISTRIBUTION_CHANGE, Rule.BINARY): _binary,
    (PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED): _binary_relaxed,
}


# -- robust mode: the same (pair, rule) keys, for laws known up to an L1 ball ---------------
# (first, second, epsilon, radius of first, radius of second, domain) -> (theta, theorem)
RobustCalibrator = Callable[
    [Distribution, Distribution, float, float, float, Sequence[float] | None], Derivation
]


def _robust_exact(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Derivation:
    return robust.robust_exact(a, b, e, ra, rb, dom)


def _worst_case(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Derivation:
    """max |x - x'| / eps over the points the balls reach (Proposition 1 for any coupling).

    Value pairs: a ball of radius > 0 reaches every domain point, so this is Theorem 1 (2) on
    the reachable points, tight. Theorem 3 (max|t|) on (P, delta_0): the same max over the
    reachable points, tight. Pairs of two balls under Theorem 4 or the binary Lemmas: the span
    of the reachable points, a valid (conservative) bound. Rule kantorovich does not come here
    (``_robust_kantorovich``: the reachable spread, at most this span).
    """
    theta = robust.worst_case_theta(a, b, e, ra, rb, dom)
    return Derivation(theta, "worst case over the reachable points (Proposition 1)")


def _robust_kantorovich(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Derivation:
    """Proposition 1 for every law in the balls: sup over A' in B(A, ra), B' in B(B, rb) of
    the W_inf (monotone plan) spread, / eps (``core.robust.reach_spread``; docs/privacy.md,
    "Robust Kantorovich theta"). The smallest theta whose charge max(eps, spread / theta) is
    eps: the release plan charges with that same sup (the span of the reachable
    points, used before, is never smaller and charged the same eps with more noise)."""
    theta = robust.reach_spread(a, b, ra, rb, dom) / e
    return Derivation(theta, "Proposition 1 over the L1 balls")


def _robust_thm3_relaxed(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Derivation:
    """Theorem 3 relaxed for every law in the ball: E_P[e^{|D|/theta}] is linear in P and its
    coefficients increase with |x| whatever theta, so one law maximises it for every theta
    (greedy: r/2 mass from the smallest |x| to the largest); calibrate that law."""
    return _thm3_relaxed(robust.worst_presence_law(a, ra, dom), b, e, point_zero())


_ROBUST_DISTRIBUTION: dict[Rule, RobustCalibrator] = {
    Rule.EXACT: _robust_exact,
    Rule.KANTOROVICH: _robust_kantorovich,
    Rule.BOUND: _worst_case,
    Rule.RELAXED: _worst_case,
    Rule.BINARY: _worst_case,
}

ROBUST: dict[tuple[PairKind, Rule], RobustCalibrator] = {
    **{
        (kind, how): _robust_kantorovich if how is Rule.KANTOROVICH else _worst_case
        for kind, how in TABLE
        if kind in (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE)
    },
    **{
        (kind, how): _ROBUST_DISTRIBUTION[how]
        for kind, how in TABLE
        if kind in (PairKind.DISTRIBUTION_PRESENCE, PairKind.DISTRIBUTION_CHANGE)
    },
    (PairKind.DISTRIBUTION_PRESENCE, Rule.RELAXED): _robust_thm3_relaxed,
}
_ROBUST_GENERIC: dict[Rule, RobustCalibrator] = {
    Rule.EXACT: _robust_exact, Rule.KANTOROVICH: _robust_kantorovich
}


def calibrate(
    kind: PairKind | None,
    how: Rule,
    first: Distribution,
    second: Distribution,
    eps: float,
    rest: Distribution | None = None,
    radii: tuple[float, float] = (0.0, 0.0),
    domain: Sequence[float] | None = None,
) -> Calibration:
    """theta for the pair (first, second) of kind ``kind`` (None: two priors of X, the generic
    rules only) under rule ``how``.

    ``radii`` (r_first, r_second): each law is only known up to an L1 ball of that radius,
    whose laws live on its support plus ``domain``. Both 0: the entry of ``TABLE``. Else the
    same (pair, rule) key in ``ROBUST``: theta valid for every law in the balls — the exact
    rule is robust over the balls (core.robust.robust_exact), so `exact` keeps its name: with
    a radius it means "exact for every law the published one may stand for".
    """
    e = validation.epsilon(eps)
    how = rule(how)
    r_first = validation.radius(radii[0], "radius")
    r_second = validation.radius(radii[1], "radius")
    applicable(kind, how)
    if r_first > 0.0 or r_second > 0.0:
        if how is Rule.BINARY:  # the binary Lemmas need Bernoulli laws, in the ball too
            first.bernoulli_p()
            second.bernoulli_p()
        robust_entry = _ROBUST_GENERIC[how] if kind is None else ROBUST[(kind, how)]
        derived = robust_entry(first, second, e, r_first, r_second, domain)
    else:
        entry = _GENERIC[how] if kind is None else TABLE[(kind, how)]
        derived = entry(first, second, e, rest if rest is not None else point_zero())
    return Calibration(derived.theta, e, how.value, kind.value if kind else PRIORS, derived.theorem)
