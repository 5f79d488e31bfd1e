"""The paper's vocabulary in one place: pair kinds, rules, the (pair, rule) -> theorem table.

Every other module (the spec parser, the CLI, the settings, the stream) names secret pairs and
rules through these enums and calibrates through ``calibrate``; nothing else dispatches on a
pair or rule name. Each entry of the table cites its theorem; the argument that applying it to
a user's *own* pair is valid for every population is docs/privacy.md, "User-local calibration"
(the exact rule: docs/errata.md, "A user-local exact calibration").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

from core import _validate
from core.distribution import Distribution, point_zero
from core.errors import PufferfishInputError


class PairKind(StrEnum):
    """The secret pairs of the paper (Section 3)."""

    VALUE_CHANGE = "value_change"  # S_{a,b}
    VALUE_PRESENCE = "value_presence"  # S_{a,perp}
    DISTRIBUTION_PRESENCE = "distribution_presence"  # S_{P,perp}
    DISTRIBUTION_CHANGE = "distribution_change"  # S_{P,Q}


class Rule(StrEnum):
    """How theta is derived from a pair of priors."""

    EXACT = "exact"  # smallest theta passing the exact two-sided audit (docs/errata.md)
    KANTOROVICH = "kantorovich"  # Proposition 1: W_inf spread / eps
    BOUND = "bound"  # Theorems 1-4 as stated
    RELAXED = "relaxed"  # Theorem 3 relaxed; corrected relaxed binary Lemma
    BINARY = "binary"  # Lemma SuffCondSPQBinary (two Bernoulli laws): 1 / eps


# Rules a deployment may configure (binary only applies to two Bernoulli laws).
STREAM_RULES = (Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND, Rule.RELAXED)
# Rules that apply to any two priors of X, whatever the pair.
GENERIC_RULES = (Rule.KANTOROVICH, Rule.EXACT)


@dataclass(frozen=True, slots=True)
class Calibration:
    """A noise scale and where it came from (``pair`` names the secret pair kind)."""

    theta: float
    epsilon: float
    rule: str
    pair: str
    theorem: str


# (first prior, second prior, epsilon, law of the rest of X) -> Calibration
Calibrator = Callable[[Distribution, Distribution, float, Distribution], Calibration]


# The calibrators are imported inside each entry: core.calibrators pulls in scipy (~0.5 s),
# which a rejected spec never needs.
def _exact(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import exact

    return exact(a, b, e)


def _kantorovich(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import kantorovich

    return kantorovich(a, b, e)


def _point(law: Distribution, field: str) -> float:
    """The value of a point mass (value pairs are pairs of point masses)."""
    support = law.positive_support()
    if len(support) != 1:
        raise PufferfishInputError(field, "must be a point mass for a value pair")
    return float(support[0])


def _thm1(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import value_change

    return value_change(_point(a, "a"), _point(b, "b"), e)


def _thm2(a: Distribution, _b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import value_presence

    return value_presence(_point(a, "a"), e)


def _thm3_bound(a: Distribution, _b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import distribution_presence_bound

    return distribution_presence_bound(a, e)


def _thm3_relaxed(a: Distribution, _b: Distribution, e: float, _r: Distribution) -> Calibration:
    from core import calibrators

    if a.is_bernoulli():
        return calibrators.distribution_presence_bernoulli(a.bernoulli_p(), e)
    return calibrators.distribution_presence_relaxed(a, e)


def _thm4(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import distribution_change_thm4

    return distribution_change_thm4(a, b, e)


def _binary(a: Distribution, b: Distribution, e: float, _rest: Distribution) -> Calibration:
    from core.calibrators import distribution_change_binary

    return distribution_change_binary(a, b, e)


def _binary_relaxed(a: Distribution, b: Distribution, e: float, rest: Distribution) -> Calibration:
    """Corrected relaxed binary Lemma (docs/errata.md 1-3) for two Bernoulli laws, else Thm 4.

    Its minimum psi sits just past the end of the rest's support whatever the rest is, so with
    the rest delta_0 it is valid for every population (docs/privacy.md, "User-local
    calibration").
    """
    from core import calibrators

    if a.is_bernoulli() and b.is_bernoulli():
        return calibrators.distribution_change_binary_relaxed(a, b, rest, e)
    return calibrators.distribution_change_thm4(a, b, e)


_GENERIC: dict[Rule, Calibrator] = {Rule.EXACT: _exact, Rule.KANTOROVICH: _kantorovich}

TABLE: dict[tuple[PairKind, Rule], Calibrator] = {
    **{(kind, rule): fn for kind in PairKind for rule, fn in _GENERIC.items()},
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


# -- robust mode (issue 15): the same (pair, rule) keys, for laws known up to an L1 ball ------
# (first, second, epsilon, radius of first, radius of second, domain) -> Calibration
RobustCalibrator = Callable[
    [Distribution, Distribution, float, float, float, Sequence[float] | None], Calibration
]


def _robust_exact(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Calibration:
    from core.robust import robust_exact

    return robust_exact(a, b, e, ra, rb, dom)


def _worst_case(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Calibration:
    """max |x - x'| / eps over the points the balls reach (Proposition 1 for any coupling).

    Value pairs: a ball of radius > 0 reaches every domain point, so this is Theorem 1 (2) on
    the reachable points, tight. Theorem 3 (max|t|) on (P, delta_0): the same max over the
    reachable points, tight. Pairs of two balls under Theorem 4 or the binary Lemmas: the span
    of the reachable points, a valid (conservative) bound. Rule kantorovich does not come here
    (``_robust_kantorovich``: the reachable spread, at most this span).
    """
    from core.robust import worst_case_theta

    theta = worst_case_theta(a, b, e, ra, rb, dom)
    return Calibration(theta, e, "", "", "worst case over the reachable points (issue 15)")


def _robust_kantorovich(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Calibration:
    """Proposition 1 for every law in the balls: sup over A' in B(A, ra), B' in B(B, rb) of
    the W_inf (monotone plan) spread, / eps (``core.robust.reach_spread``; docs/privacy.md,
    "Robust Kantorovich theta"). The smallest theta whose charge max(eps, spread / theta) is
    eps: the release plan charges with that same sup (the span of the reachable
    points, used before, is never smaller and charged the same eps with more noise)."""
    from core.robust import reach_spread

    theta = reach_spread(a, b, ra, rb, dom) / e
    return Calibration(theta, e, "", "", "Proposition 1 over the L1 balls")


def _robust_thm3_relaxed(
    a: Distribution, b: Distribution, e: float, ra: float, rb: float, dom: Sequence[float] | None
) -> Calibration:
    """Theorem 3 relaxed for every law in the ball: E_P[e^{|D|/theta}] is linear in P and its
    coefficients increase with |x| whatever theta, so one law maximises it for every theta
    (greedy: r/2 mass from the smallest |x| to the largest); calibrate that law."""
    from core.robust import worst_presence_law

    return _thm3_relaxed(worst_presence_law(a, ra, dom), b, e, point_zero())


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


def rules_for(kind: PairKind | None) -> tuple[Rule, ...]:
    """The rules that apply to a pair kind (None: two priors of X, only the generic rules)."""
    if kind is None:
        return GENERIC_RULES
    return tuple(rule for rule in Rule if (kind, rule) in TABLE)


def pair_kind(value: object, field: str = "pair") -> PairKind:
    try:
        return PairKind(str(value))
    except ValueError:
        names = ", ".join(k.value for k in PairKind)
        raise PufferfishInputError(field, f"must be one of {names}; got {value!r}") from None


def rule(value: object, field: str = "rule", allowed: tuple[Rule, ...] = tuple(Rule)) -> Rule:
    try:
        out = Rule(str(value))
    except ValueError:
        out = None
    if out is None or out not in allowed:
        names = ", ".join(r.value for r in allowed)
        raise PufferfishInputError(field, f"must be one of {names}; got {value!r}")
    return out


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
    """theta for the pair (first, second) of kind ``kind`` under rule ``how``.

    ``radii`` (r_first, r_second): each law is only known up to an L1 ball of that radius,
    whose laws live on its support plus ``domain`` (issue 15). Both 0: the table above. Else
    the same (pair, rule) key in ``ROBUST``: theta valid for every law in the balls — the exact
    rule is robust over the balls (core.robust.robust_exact), so `exact` keeps its name: with
    a radius it means "exact for every law the published one may stand for".
    """
    e = _validate.epsilon(eps)
    how = rule(how)
    r_first = _validate.radius(radii[0], "radius")
    r_second = _validate.radius(radii[1], "radius")
    fn = _GENERIC.get(how) if kind is None else TABLE.get((kind, how))
    if fn is None:
        allowed = ", ".join(r.value for r in rules_for(kind))
        raise PufferfishInputError(
            "rule", f"{how.value!r} does not apply to {kind or 'priors'}; use one of {allowed}"
        )
    if r_first > 0.0 or r_second > 0.0:
        robust = _ROBUST_GENERIC[how] if kind is None else ROBUST[(kind, how)]
        if how is Rule.BINARY:  # the binary Lemmas need Bernoulli laws, in the ball too
            fn(first, second, e, point_zero())
        result = robust(first, second, e, r_first, r_second, domain)
    else:
        result = fn(first, second, e, rest if rest is not None else point_zero())
    return replace(result, rule=how.value, pair=kind.value if kind else "priors")
