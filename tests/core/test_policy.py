"""core/policy.py: the (pair kind, rule) table, its parsers, and every entry's privacy.

Expected values are derived by hand (Thm 1 |a-b|/eps, Thm 2 |a|/eps, Thm 3 max|t|/eps, Thm 4
spread/eps, binary 1/eps, the Bernoulli closed forms), never by calling the calibrators.
Privacy is checked with the exact two-sided audit (core.auditor.audit, tested elsewhere) and
cross-checked with ``brute_loss``, an independent dense-grid evaluation of the loss below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.policy import TABLE, calibrate
from pufferfish_core.vocabulary import (
    GENERIC_RULES,
    STREAM_RULES,
    Calibration,
    PairKind,
    Rule,
    pair_kind,
    rule,
    rules_for,
)
from tests.core.strategies import integer_law

SLACK = 1 + 1e-9
EPS = 0.5
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ZERO = Distribution.point(0)
P3 = Distribution.from_points([-4, 1, 3], [0.2, 0.5, 0.3])  # max|t| = 4
G1 = Distribution.from_points([0, 1, 2], [0.6, 0.3, 0.1])
G2 = Distribution.from_points([0, 1, 2], [0.2, 0.3, 0.5])  # monotone plan of (G1, G2): spread 2
B2, B9 = Distribution.bernoulli(0.2), Distribution.bernoulli(0.9)


# -- independent brute-force audit ---------------------------------------------------------
def brute_loss(a: Distribution, b: Distribution, theta: float, n: int = 20_001) -> float:
    """max over a dense grid of y of |log(sum_a A(a) e^{-|y-a|/theta} / sum_b B(b) ...)|.

    The grid covers both supports and reaches 20 theta (and at least 5) beyond them; every
    support point is on it (the sup is attained there or in the constant tails).
    """
    ax, ap = (np.array(v, dtype=float) for v in (a.support, a.probs))
    bx, bp = (np.array(v, dtype=float) for v in (b.support, b.probs))
    ax, ap = ax[ap > 0], ap[ap > 0]
    bx, bp = bx[bp > 0], bp[bp > 0]
    lo = min(ax.min(), bx.min()) - max(20 * theta, 5.0)
    hi = max(ax.max(), bx.max()) + max(20 * theta, 5.0)
    ys = np.union1d(np.linspace(lo, hi, n), np.concatenate((ax, bx)))
    la = logsumexp(-np.abs(ys[:, None] - ax[None, :]) / theta, b=ap[None, :], axis=1)
    lb = logsumexp(-np.abs(ys[:, None] - bx[None, :]) / theta, b=bp[None, :], axis=1)
    return float(np.max(np.abs(la - lb)))


def test_brute_loss_on_hand_values() -> None:
    # Two points: the loss is |a - b| / theta exactly (Laplace mechanism).
    assert math.isclose(brute_loss(Distribution.point(5), Distribution.point(2), 4.0), 0.75)
    # {0: .5, 8: .5} against delta_0: log(.5 + .5 e^{8/theta}) (right tail, y >= 8).
    theta = 10.0
    want = math.log(0.5 + 0.5 * math.exp(8 / theta))
    assert math.isclose(brute_loss(Distribution.from_points([0, 8], [0.5, 0.5]), ZERO, theta),
                        want, rel_tol=1e-12)


# -- pairs of every kind -------------------------------------------------------------------
# (kind, first, second): value pairs on points, distribution pairs on small integer laws,
# Bernoulli laws where the binary and relaxed rules have their own formulas.
PAIRS: list[tuple[PairKind, Distribution, Distribution]] = [
    (PairKind.VALUE_CHANGE, Distribution.point(5), Distribution.point(2)),
    (PairKind.VALUE_CHANGE, Distribution.point(-3), Distribution.point(4)),
    (PairKind.VALUE_PRESENCE, Distribution.point(-3), ZERO),
    (PairKind.VALUE_PRESENCE, Distribution.point(7), ZERO),
    (PairKind.DISTRIBUTION_PRESENCE, P3, ZERO),
    (PairKind.DISTRIBUTION_PRESENCE, Distribution.from_points([0, 8], [0.5, 0.5]), ZERO),
    (PairKind.DISTRIBUTION_PRESENCE, Distribution.bernoulli(0.3), ZERO),
    (PairKind.DISTRIBUTION_CHANGE, G1, G2),
    (PairKind.DISTRIBUTION_CHANGE, G1, Distribution.from_points([0, 8], [0.5, 0.5])),
    (PairKind.DISTRIBUTION_CHANGE, B2, B9),
    (PairKind.DISTRIBUTION_CHANGE, B9, B2),
    (PairKind.DISTRIBUTION_CHANGE, Distribution.bernoulli(0.5), Distribution.bernoulli(0.55)),
]


def applicable(kind: PairKind, a: Distribution, b: Distribution) -> list[Rule]:
    """Rules of the table for this kind that accept this pair (binary: two Bernoulli laws)."""
    out = [r for (k, r) in TABLE if k is kind]
    if not (a.is_bernoulli() and b.is_bernoulli()):
        out = [r for r in out if r is not Rule.BINARY]
    return out


def test_every_table_entry_is_exercised() -> None:
    covered = {(kind, r) for kind, a, b in PAIRS for r in applicable(kind, a, b)}
    assert covered == set(TABLE)


@pytest.mark.parametrize(("kind", "a", "b"), PAIRS, ids=lambda v: str(v)[:40])
@pytest.mark.parametrize("eps", [0.1, 0.5, 2.0])
def test_every_entry_passes_the_exact_audit_and_exact_is_least(
    kind: PairKind, a: Distribution, b: Distribution, eps: float
) -> None:
    thetas = {r: calibrate(kind, r, a, b, eps).theta for r in applicable(kind, a, b)}
    for r, theta in thetas.items():
        if theta == 0:  # allowed only when the pair passes without noise (same support)
            assert r is Rule.EXACT and audit(a, b, 0.0).loss <= eps, r
            continue
        result = audit(a, b, theta)
        assert result.forward <= eps * SLACK and result.reverse <= eps * SLACK, (r, theta)
        assert brute_loss(a, b, theta) <= eps * SLACK, (r, theta)
        assert thetas[Rule.EXACT] <= theta * SLACK, (r, thetas)
    exact = thetas[Rule.EXACT]
    if exact > 0:
        assert audit(a, b, exact).loss <= eps
        assert audit(a, b, 0.99 * exact).loss > eps
        assert brute_loss(a, b, 0.99 * exact) > eps


def test_same_support_pair_below_eps_gets_no_noise_from_exact() -> None:
    # Bernoulli(.5) vs Bernoulli(.55): without noise the loss is max(log(.55/.5),
    # log(.5/.45)) = log(10/9) = 0.105..., so at eps 0.5 exact is 0, at eps 0.1 it is not.
    a, b = Distribution.bernoulli(0.5), Distribution.bernoulli(0.55)
    assert math.isclose(audit(a, b, 0.0).loss, math.log(10 / 9), rel_tol=1e-12)
    assert calibrate(PairKind.DISTRIBUTION_CHANGE, Rule.EXACT, a, b, 0.5).theta == 0.0
    assert calibrate(PairKind.DISTRIBUTION_CHANGE, Rule.EXACT, a, b, 0.1).theta > 0.0


# small laws: the closed-form rules are checked on many kinds and rules per example
SMALL_LAW = integer_law(max_k=6, lo=-8, hi=8, max_count=50)


@st.composite
def any_pair(draw: st.DrawFn) -> tuple[PairKind, Distribution, Distribution]:
    kind = draw(st.sampled_from(list(PairKind)))
    if kind is PairKind.VALUE_CHANGE:
        x, y = draw(st.lists(st.integers(-20, 20), min_size=2, max_size=2, unique=True))
        return kind, Distribution.point(x), Distribution.point(y)
    if kind is PairKind.VALUE_PRESENCE:
        return kind, Distribution.point(draw(st.integers(-20, 20).filter(bool))), ZERO
    bern = st.integers(0, 20).map(lambda n: Distribution.bernoulli(n / 20))
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return kind, draw(st.one_of(SMALL_LAW, bern)), ZERO
    if draw(st.booleans()):
        return kind, draw(bern), draw(bern)
    return kind, draw(SMALL_LAW), draw(SMALL_LAW)


@FAST
@given(any_pair(), st.floats(0.05, 3.0))
def test_random_pairs_every_rule_passes_and_exact_is_least(
    pair: tuple[PairKind, Distribution, Distribution], eps: float
) -> None:
    kind, a, b = pair
    thetas = {r: calibrate(kind, r, a, b, eps).theta for r in applicable(kind, a, b)}
    for r, theta in thetas.items():
        if theta == 0:  # only when the pair is harmless without noise
            assert audit(a, b, 0.0).loss <= eps, r
            continue
        assert audit(a, b, theta).loss <= eps * SLACK, (r, theta)
        assert thetas[Rule.EXACT] <= theta * SLACK, (r, thetas)
    exact = thetas[Rule.EXACT]
    if exact > 0:
        assert audit(a, b, 0.99 * exact).loss > eps


def test_brute_force_agrees_with_the_auditor_on_a_few_random_cases() -> None:
    rng = np.random.default_rng(7)
    for _ in range(8):
        xs = rng.choice(np.arange(-6, 7), size=3, replace=False)
        ys = rng.choice(np.arange(-6, 7), size=4, replace=False)
        a = Distribution.from_counts(xs.tolist(), rng.integers(1, 10, size=3).tolist())
        b = Distribution.from_counts(ys.tolist(), rng.integers(1, 10, size=4).tolist())
        theta = calibrate(PairKind.DISTRIBUTION_CHANGE, Rule.EXACT, a, b, 0.7).theta
        for t in (theta, 0.9 * theta, 2.0 * theta):
            assert math.isclose(brute_loss(a, b, t), audit(a, b, t).loss, rel_tol=1e-9)


# -- hand-derived values -------------------------------------------------------------------
E = math.exp(EPS)
HAND: list[tuple[PairKind, Rule, Distribution, Distribution, float, str]] = [
    (PairKind.VALUE_CHANGE, Rule.BOUND, Distribution.point(5), Distribution.point(2),
     3 / EPS, "Theorem 1"),
    (PairKind.VALUE_CHANGE, Rule.RELAXED, Distribution.point(5), Distribution.point(2),
     3 / EPS, "Theorem 1"),
    (PairKind.VALUE_CHANGE, Rule.KANTOROVICH, Distribution.point(5), Distribution.point(2),
     3 / EPS, "Proposition 1"),
    (PairKind.VALUE_PRESENCE, Rule.BOUND, Distribution.point(-3), ZERO, 3 / EPS, "Theorem 2"),
    (PairKind.VALUE_PRESENCE, Rule.RELAXED, Distribution.point(-3), ZERO, 3 / EPS, "Theorem 2"),
    (PairKind.DISTRIBUTION_PRESENCE, Rule.BOUND, P3, ZERO, 4 / EPS, "Theorem 3 (max|t|)"),
    (PairKind.DISTRIBUTION_PRESENCE, Rule.KANTOROVICH, P3, ZERO, 4 / EPS, "Proposition 1"),
    # Theorem 3 relaxed, Bernoulli closed form: 1 / log((e^eps - (1 - p)) / p).
    (PairKind.DISTRIBUTION_PRESENCE, Rule.RELAXED, Distribution.bernoulli(0.3), ZERO,
     1 / math.log((E - 0.7) / 0.3), "Theorem 3 (Bernoulli)"),
    # Theorem 4: the monotone plan of (G1, G2) pairs levels (.5, .6] as 0 -> 2: spread 2.
    (PairKind.DISTRIBUTION_CHANGE, Rule.BOUND, G1, G2, 2 / EPS, "Theorem 4"),
    (PairKind.DISTRIBUTION_CHANGE, Rule.KANTOROVICH, G1, G2, 2 / EPS, "Proposition 1"),
    (PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED, G1, G2, 2 / EPS, "Theorem 4"),
    (PairKind.DISTRIBUTION_CHANGE, Rule.BINARY, B2, B9, 1 / EPS, "Lemma SuffCondSPQBinary"),
    # Corrected relaxed binary Lemma with rest delta_0: psi = p/(q-p) (p < q) or
    # (1-p)/(p-q) (p > q); theta = 1 / log(e^eps + (e^eps - 1) psi).
    (PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED, B2, B9,
     1 / math.log(E + (E - 1) * 0.2 / 0.7), "Lemma SuffCondSPQBinaryRelax (corrected)"),
    (PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED, B9, B2,
     1 / math.log(E + (E - 1) * 0.1 / 0.7), "Lemma SuffCondSPQBinaryRelax (corrected)"),
]


@pytest.mark.parametrize(("kind", "how", "a", "b", "want", "theorem"), HAND,
                         ids=[f"{k.value}-{r.value}-{i}" for i, (k, r, *_) in enumerate(HAND)])
def test_hand_values_and_theorem_names(
    kind: PairKind, how: Rule, a: Distribution, b: Distribution, want: float, theorem: str
) -> None:
    got = calibrate(kind, how, a, b, EPS)
    assert isinstance(got, Calibration)
    assert math.isclose(got.theta, want, rel_tol=1e-12), (got.theta, want)
    assert got.theorem == theorem
    assert got.epsilon == EPS


def test_exact_on_point_pairs_is_the_laplace_scale() -> None:
    # For two points the loss is |a-b|/theta: the smallest passing theta is |a-b|/eps.
    for kind, a, b, diff in [
        (PairKind.VALUE_CHANGE, Distribution.point(5), Distribution.point(2), 3.0),
        (PairKind.VALUE_PRESENCE, Distribution.point(-7), ZERO, 7.0),
    ]:
        got = calibrate(kind, Rule.EXACT, a, b, EPS)
        assert diff / EPS <= got.theta * (1 + 1e-12)
        assert got.theta <= diff / EPS * (1 + 1e-6)
        assert got.theorem == "exact audit (ERRATA)"


def test_exact_on_the_issue_example_closed_form() -> None:
    # {0:.5, 8:.5} vs delta_0: forward loss log(.5 + .5 e^{8/theta}) = eps binds, reverse
    # -log(.5 + .5 e^{-8/theta}) is smaller: theta = 8 / log(2 e^eps - 1) = 9.6177...
    law = Distribution.from_points([0, 8], [0.5, 0.5])
    want = 8 / math.log(2 * math.exp(0.5) - 1)
    got = calibrate(PairKind.DISTRIBUTION_PRESENCE, Rule.EXACT, law, ZERO, 0.5)
    assert want <= got.theta * (1 + 1e-12) and got.theta <= want * (1 + 1e-6)
    assert round(got.theta, 4) == 9.6177


def test_relaxed_presence_solves_its_equation() -> None:
    # Theorem 3 relaxed (non-Bernoulli): E_P[e^{|D|/theta}] = e^eps.
    got = calibrate(PairKind.DISTRIBUTION_PRESENCE, Rule.RELAXED, P3, ZERO, EPS)
    assert got.theorem == "Theorem 3 (relaxed)"
    lhs = 0.2 * math.exp(4 / got.theta) + 0.5 * math.exp(1 / got.theta) + 0.3 * math.exp(
        3 / got.theta
    )
    assert math.isclose(lhs, E, rel_tol=1e-9)


def test_relaxed_change_uses_the_rest() -> None:
    # With a rest law the corrected Lemma must hold for the whole X = D_i + rest.
    rest = Distribution.from_points([0, 1, 3], [0.3, 0.5, 0.2])
    theta = calibrate(PairKind.DISTRIBUTION_CHANGE, Rule.RELAXED, B2, B9, EPS, rest).theta
    assert audit(B2.convolve(rest), B9.convolve(rest), theta).loss <= EPS * SLACK
    assert brute_loss(B2.convolve(rest), B9.convolve(rest), theta) <= EPS * SLACK


def test_generic_rules_apply_without_a_kind() -> None:
    got = calibrate(None, Rule.KANTOROVICH, G1, G2, EPS)
    assert math.isclose(got.theta, 2 / EPS, rel_tol=1e-12)
    exact = calibrate(None, Rule.EXACT, G1, G2, EPS).theta
    assert 0 < exact <= got.theta
    assert audit(G1, G2, exact).loss <= EPS


def test_same_law_needs_no_noise() -> None:
    for how in (Rule.EXACT, Rule.BOUND, Rule.KANTOROVICH):
        assert calibrate(PairKind.DISTRIBUTION_CHANGE, how, G1, G1, EPS).theta == 0.0


# -- vocabulary ----------------------------------------------------------------------------
def test_rules_for_each_kind() -> None:
    assert rules_for(None) == GENERIC_RULES == (Rule.KANTOROVICH, Rule.EXACT)
    common = (Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND, Rule.RELAXED)
    assert rules_for(PairKind.VALUE_CHANGE) == common
    assert rules_for(PairKind.VALUE_PRESENCE) == common
    assert rules_for(PairKind.DISTRIBUTION_PRESENCE) == common
    assert rules_for(PairKind.DISTRIBUTION_CHANGE) == (*common, Rule.BINARY)
    assert set(STREAM_RULES) == set(common) and Rule.BINARY not in STREAM_RULES


def test_table_keys() -> None:
    assert len(TABLE) == 17
    # the vocabulary says which rules apply; the table has a theorem for exactly those
    assert set(TABLE) == {(kind, how) for kind in PairKind for how in rules_for(kind)}
    for kind in PairKind:
        for how in GENERIC_RULES:
            assert (kind, how) in TABLE
    assert (PairKind.VALUE_CHANGE, Rule.BINARY) not in TABLE
    assert (PairKind.DISTRIBUTION_PRESENCE, Rule.BINARY) not in TABLE


def test_parsers_accept_every_name() -> None:
    for kind in PairKind:
        assert pair_kind(kind.value) is kind
    for how in Rule:
        assert rule(how.value) is how
    assert pair_kind("distribution_change") is PairKind.DISTRIBUTION_CHANGE
    assert rule("exact", allowed=STREAM_RULES) is Rule.EXACT


@pytest.mark.parametrize("bad", ["", "Exact", "thm1", None, 3, "binary "])
def test_rule_parse_errors(bad: object) -> None:
    with pytest.raises(PufferfishInputError) as info:
        rule(bad)
    assert info.value.field == "rule"


def test_rule_outside_allowed_is_refused_with_the_given_field() -> None:
    with pytest.raises(PufferfishInputError) as info:
        rule("binary", allowed=STREAM_RULES)
    assert info.value.field == "rule"
    with pytest.raises(PufferfishInputError) as info:
        rule("nope", field="settings.rule")
    assert info.value.field == "settings.rule"


@pytest.mark.parametrize("bad", ["", "value", "S_ab", None, 1, "Value_Change"])
def test_pair_parse_errors(bad: object) -> None:
    with pytest.raises(PufferfishInputError) as info:
        pair_kind(bad)
    assert info.value.field == "pair"
    with pytest.raises(PufferfishInputError) as info:
        pair_kind(bad, field="pairs[1]")
    assert info.value.field == "pairs[1]"


@pytest.mark.parametrize("how", [Rule.BOUND, Rule.RELAXED, Rule.BINARY])
def test_calibrate_without_kind_refuses_pair_specific_rules(how: Rule) -> None:
    with pytest.raises(PufferfishInputError) as info:
        calibrate(None, how, G1, G2, EPS)
    assert info.value.field == "rule"


@pytest.mark.parametrize(
    "kind", [PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE, PairKind.DISTRIBUTION_PRESENCE]
)
def test_binary_applies_only_to_distribution_change(kind: PairKind) -> None:
    with pytest.raises(PufferfishInputError) as info:
        calibrate(kind, Rule.BINARY, B2, B9, EPS)
    assert info.value.field == "rule"


def test_binary_refuses_non_bernoulli_laws() -> None:
    with pytest.raises(PufferfishInputError) as info:
        calibrate(PairKind.DISTRIBUTION_CHANGE, Rule.BINARY, G1, G2, EPS)
    assert info.value.field == "distribution"


@pytest.mark.parametrize("eps", [0.0, -1.0, math.nan, math.inf])
def test_calibrate_refuses_bad_epsilon(eps: float) -> None:
    for kind, how in TABLE:
        a, b = (B2, B9) if how is Rule.BINARY else (Distribution.point(1), ZERO)
        with pytest.raises(PufferfishInputError) as info:
            calibrate(kind, how, a, b, eps)
        assert info.value.field == "epsilon"


@pytest.mark.parametrize(
    ("kind", "a", "b", "need"),
    [
        # delta_20 written with a zero-probability point first: needs |20 - 9| / eps = 11.
        (PairKind.VALUE_CHANGE, Distribution.from_points([9.5, 20], [0, 1]),
         Distribution.point(9), 11.0),
        # delta_20 with a zero-probability -0.5: needs |20| / eps = 20.
        (PairKind.VALUE_PRESENCE, Distribution.from_points([-0.5, 20], [0, 1]), ZERO, 20.0),
        # not a point mass at all: refuse, or give a theta that passes.
        (PairKind.VALUE_PRESENCE, Distribution.from_points([1, 20], [0.5, 0.5]), ZERO, None),
    ],
)
@pytest.mark.parametrize("how", [Rule.BOUND, Rule.RELAXED])
def test_value_rules_on_laws_that_are_not_plain_points(
    kind: PairKind, a: Distribution, b: Distribution, need: float | None, how: Rule
) -> None:
    # BUG (reported, not fixed here; latent: core.plan and core.spec build value pairs with
    # Distribution.point). calibrate(value_change, bound, {9.5: 0, 20: 1}, delta_9, 1) gives
    # theta 0.5 (|9.5 - 9|), audited loss 22; expected 11 (or a PufferfishInputError).
    try:
        theta = calibrate(kind, how, a, b, 1.0).theta
    except PufferfishInputError:
        return  # refusing a value pair that is not a single point is fine
    assert audit(a, b, theta).loss <= SLACK, theta
    if need is not None:
        assert math.isclose(theta, need, rel_tol=1e-12)
