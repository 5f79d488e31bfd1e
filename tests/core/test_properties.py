"""Randomised checks: every rule's theta passes the exact two-sided audit, exact is the least.

Priors are histograms (integer counts) on integer supports with up to 20 points; the rest of
the population is another random integer law. Tolerance 1e-9 relative for closed-form rules
that are tight (their loss equals eps up to rounding); the exact rule must pass outright.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pufferfish_core import calibrators as cal
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.kantorovich import delta_star, plan_spread
from tests.core.strategies import integer_law

SLACK = 1 + 1e-9
FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def bernoulli(draw: st.DrawFn) -> Distribution:
    return Distribution.bernoulli(draw(st.integers(0, 100)) / 100)


EPS = st.floats(0.01, 5.0)
Rule = Callable[[Distribution, Distribution, float], float]


def rules_for(kind: str, a: Distribution, b: Distribution) -> dict[str, Rule]:
    """Every rule that applies to user i's own pair (a, b) of this kind."""
    rules: dict[str, Rule] = {
        "kantorovich": lambda x, y, e: cal.kantorovich(x, y, e).theta,
        "exact": lambda x, y, e: cal.exact(x, y, e).theta,
    }
    if kind == "value_change":
        rules["thm1"] = lambda x, y, e: cal.value_change(x.support[0], y.support[0], e).theta
    elif kind == "value_presence":
        rules["thm2"] = lambda x, y, e: cal.value_presence(x.support[0], e).theta
    elif kind == "distribution_presence":
        rules["thm3"] = lambda x, y, e: cal.distribution_presence_bound(x, e).theta
        rules["thm3_relaxed"] = lambda x, y, e: cal.distribution_presence_relaxed(x, e).theta
        if a.is_bernoulli():
            rules["thm3_bernoulli"] = lambda x, y, e: cal.distribution_presence_bernoulli(
                x.bernoulli_p(), e
            ).theta
    else:
        rules["thm4"] = lambda x, y, e: cal.distribution_change_thm4(x, y, e).theta
        if a.is_bernoulli() and b.is_bernoulli():
            rules["binary"] = lambda x, y, e: cal.distribution_change_binary(x, y, e).theta
            rules["binary_relaxed"] = lambda x, y, e: cal.distribution_change_binary_relaxed(
                x, y, Distribution.point(0), e
            ).theta
    return rules


@st.composite
def own_pair(draw: st.DrawFn) -> tuple[str, Distribution, Distribution]:
    kind = draw(
        st.sampled_from(
            ["value_change", "value_presence", "distribution_presence", "distribution_change"]
        )
    )
    if kind == "value_change":
        a, b = draw(st.lists(st.integers(-30, 30), min_size=2, max_size=2, unique=True))
        return kind, Distribution.point(a), Distribution.point(b)
    zero = Distribution.point(0)
    if kind == "value_presence":
        return kind, Distribution.point(draw(st.integers(-30, 30).filter(bool))), zero
    law = st.one_of(integer_law(), bernoulli())
    if kind == "distribution_presence":
        return kind, draw(law), zero
    if draw(st.booleans()):
        return kind, draw(bernoulli()), draw(bernoulli())
    return kind, draw(integer_law()), draw(integer_law())


def check_all_rules(kind: str, a: Distribution, b: Distribution, eps: float,
                    rest: Distribution) -> None:
    thetas = {name: rule(a, b, eps) for name, rule in rules_for(kind, a, b).items()}
    system_a, system_b = a.convolve(rest), b.convolve(rest)
    for name, theta in thetas.items():
        own = audit(a, b, theta)
        assert own.forward <= eps * SLACK and own.reverse <= eps * SLACK, (name, theta, own)
        whole = audit(system_a, system_b, theta)
        assert whole.loss <= eps * SLACK, (name, theta, whole)
        assert thetas["exact"] <= theta * SLACK, (name, thetas)
    exact = thetas["exact"]
    assert audit(a, b, exact).loss <= eps
    if exact > 0:
        assert audit(a, b, exact * 0.99).loss > eps


@FAST
@given(own_pair(), EPS, integer_law(max_k=8, lo=-10, hi=10))
def test_every_rule_passes_the_exact_audit(
    pair: tuple[str, Distribution, Distribution], eps: float, rest: Distribution
) -> None:
    check_all_rules(*pair, eps, rest)


@settings(max_examples=150, deadline=None)
@given(integer_law(), integer_law(), EPS)
def test_distribution_change_rules(p: Distribution, q: Distribution, eps: float) -> None:
    check_all_rules("distribution_change", p, q, eps, Distribution.point(0))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 100),
    st.integers(0, 100),
    integer_law(max_k=12, lo=0, hi=30),
    st.floats(0.001, 3.0),
)
def test_corrected_relaxed_binary_lemma_on_random_rests(
    p100: int, q100: int, rest: Distribution, eps: float
) -> None:
    p, q = Distribution.bernoulli(p100 / 100), Distribution.bernoulli(q100 / 100)
    theta = cal.distribution_change_binary_relaxed(p, q, rest, eps).theta
    result = audit(p.convolve(rest), q.convolve(rest), theta)
    assert result.forward <= eps * SLACK and result.reverse <= eps * SLACK
    assert cal.exact(p, q, eps).theta <= theta * SLACK


@settings(max_examples=150, deadline=None)
@given(integer_law(), integer_law(), st.floats(0.05, 50.0), st.floats(1.0, 4.0))
def test_loss_does_not_increase_with_theta(
    a: Distribution, b: Distribution, theta: float, factor: float
) -> None:
    assert audit(a, b, theta * factor).loss <= audit(a, b, theta).loss * SLACK + 1e-12


@settings(max_examples=150, deadline=None)
@given(integer_law(), integer_law())
def test_sup_delta_star_equals_plan_spread(p: Distribution, q: Distribution) -> None:
    assert max(delta_star(p, q).values()) == plan_spread(p, q)


@settings(max_examples=100, deadline=None)
@given(integer_law(max_k=10), integer_law(max_k=10))
def test_convolution_mean_and_mass(a: Distribution, b: Distribution) -> None:
    s = a.convolve(b)
    assert abs(s.mean() - (a.mean() + b.mean())) <= 1e-9 * (1 + abs(a.mean()) + abs(b.mean()))
    assert abs(float(np.sum(s.probs)) - 1.0) <= 1e-12
    assert s.support == tuple(sorted(set(s.support)))
