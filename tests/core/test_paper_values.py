"""Point values and curves printed in the paper (and corrected in ERRATA.md).

Expected numbers come from the paper's text, tables and pgfplots data (copied below), from
ERRATA.md, or are worked out by hand in the comments; none is produced by the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from pufferfish_core import calibrators as cal
from pufferfish_core.auditor import audit
from pufferfish_core.distribution import Distribution
from pufferfish_core.kantorovich import delta_star, monotone_plan, plan_spread
from pufferfish_core.system import MultiUserSystem, User
from pufferfish_paper.paper_values import BRENT, SPQ_BINARY_RELAX

# The printed pgfplots data of fig:Brent and fig:SuffCondSPQBinaryRelax (one verbatim copy of the
# .tex, shared with `pufferfish reproduce`; data, not computed by the code under test).
BRENT_BOUND_CURVE = BRENT["bound"]
BRENT_RELAXED_CURVE = BRENT["relaxed"]
BINARY_RELAX_BLUE_CURVE = SPQ_BINARY_RELAX["binary"]
BINARY_RELAX_RED_CURVE = SPQ_BINARY_RELAX["relaxed_as_printed"]

SUPPORT = (1, 2, 3, 4, 5)
# Table ExpSetting (users 1-3) and Table ExpSettingExtraTwo (user 4's two choices).
USERS_1_3 = (
    (0.01, 0.04, 0.1, 0.2, 0.65),
    (0.7, 0.2, 0.05, 0.04, 0.01),
    (0.2, 0.2, 0.2, 0.2, 0.2),
)
P4 = Distribution.from_points(SUPPORT, (0.4, 0.1, 0.0, 0.1, 0.4))
Q4 = Distribution.from_points(SUPPORT, (0.0, 0.05, 0.9, 0.05, 0.0))
BERN_P, BERN_Q = Distribution.bernoulli(0.2), Distribution.bernoulli(0.9)
EPSILONS = (0.01, 0.1, 0.5, 1.0, 2.0)
USER4 = 3  # index of user 4


def system(user4: Distribution, zeta: float = 1.0) -> MultiUserSystem:
    users = [User(zeta=zeta, dist=Distribution.from_points(SUPPORT, p)) for p in USERS_1_3]
    return MultiUserSystem(users=(*users, User(zeta=zeta, dist=user4)))


def loss_ratio(a: Distribution, b: Distribution, theta: float, eps: float) -> float:
    return audit(a, b, theta).loss / eps


# -- Theorems 1-4 and Proposition 1 on the 4-user example -------------------------------------


@pytest.mark.parametrize("eps", EPSILONS)
def test_theorem1_value_change_5_vs_3(eps: float) -> None:
    assert cal.value_change(5, 3, eps).theta == pytest.approx(2 / eps, rel=1e-15)
    assert cal.value_change(5, 3, eps).theorem == "Theorem 1"


@pytest.mark.parametrize("eps", EPSILONS)
def test_theorem2_value_presence_5(eps: float) -> None:
    assert cal.value_presence(5, eps).theta == pytest.approx(5 / eps, rel=1e-15)


@pytest.mark.parametrize("eps", EPSILONS)
def test_theorem3_bound_on_p4(eps: float) -> None:
    assert cal.distribution_presence_bound(P4, eps).theta == pytest.approx(5 / eps, rel=1e-15)


@pytest.mark.parametrize("eps", EPSILONS)
def test_theorem4_p4_vs_q4(eps: float) -> None:
    # Hand plan of (P4, Q4): P4's levels (0,.4] at 1 meet Q4's 2 and 3, (.6,1] at 5 meet 3 and 4.
    assert cal.distribution_change_thm4(P4, Q4, eps).theta == pytest.approx(2 / eps, rel=1e-15)


@pytest.mark.parametrize("eps", EPSILONS)
def test_binary_lemma_is_one_over_eps(eps: float) -> None:
    assert cal.distribution_change_binary(BERN_P, BERN_Q, eps).theta == pytest.approx(1 / eps)


def test_kantorovich_spreads_of_the_figures() -> None:
    """Figs Sab, Saperp, SPperp, SPQ, SuffCondSPQBinary: sup|x - x'| = 2, 5, 5, 2, 1."""
    s = system(P4)
    sab = plan_spread(s.prior_value(USER4, 5), s.prior_value(USER4, 3))
    saperp = plan_spread(s.prior_value(USER4, 5), s.prior_absent(USER4))
    spperp = plan_spread(s.prior_distribution(USER4, P4), s.prior_absent(USER4))
    spq = plan_spread(s.prior_distribution(USER4, P4), s.prior_distribution(USER4, Q4))
    sb = system(BERN_P)
    binary = plan_spread(
        sb.prior_distribution(USER4, BERN_P), sb.prior_distribution(USER4, BERN_Q)
    )
    assert (sab, saperp, spperp, spq, binary) == (2.0, 5.0, 5.0, 2.0, 1.0)
    assert cal.kantorovich(s.prior_value(USER4, 5), s.prior_absent(USER4), 0.5).theta == 10.0


def test_rest_law_of_users_1_to_3() -> None:
    # Sum of three users on {1..5}: support 3..15; Pr(sum = 3) = .01 * .7 * .2 by hand.
    rest = system(P4).rest_law(USER4)
    assert rest.support == tuple(float(x) for x in range(3, 16))
    assert rest.prob(3.0) == pytest.approx(0.01 * 0.7 * 0.2, rel=1e-12)
    assert rest.prob(15.0) == pytest.approx(0.65 * 0.01 * 0.2, rel=1e-12)
    assert rest.mean() == pytest.approx(4.44 + 1.46 + 3.0, rel=1e-12)


# -- Appendix example (Tables ex2P, ex2F, ex2PiStar) --------------------------------------------

EX2_P = Distribution.from_points(SUPPORT, (0.2, 0.225, 0.5, 0.075, 0.0))
EX2_Q = Distribution.from_points(SUPPORT, (0.0, 0.075, 0.5, 0.225, 0.2))


def test_table_ex2f_with_errata_corrections() -> None:
    assert [EX2_P.cdf(x) for x in SUPPORT] == pytest.approx([0.2, 0.425, 0.925, 1, 1], abs=1e-15)
    assert [EX2_Q.cdf(x) for x in SUPPORT] == pytest.approx([0, 0.075, 0.575, 0.8, 1], abs=1e-15)


def test_table_ex2pistar_exactly() -> None:
    printed = np.array(
        [
            [0, 0.075, 0.125, 0, 0],
            [0, 0, 0.225, 0, 0],
            [0, 0, 0.15, 0.225, 0.125],
            [0, 0, 0, 0, 0.075],
            [0, 0, 0, 0, 0],
        ]
    )
    plan = monotone_plan(EX2_P, EX2_Q)
    assert plan.points.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    np.testing.assert_allclose(plan.matrix, printed, rtol=0, atol=1e-15)
    assert plan_spread(EX2_P, EX2_Q) == 2.0


def test_delta_star_of_the_example() -> None:
    # ERRATA 5: Delta*(2, 3, 4) = 1, 2, 1; Delta*(1) = 2 (printed), Delta*(5) = 0; sup = 2.
    assert delta_star(EX2_P, EX2_Q) == {1.0: 2.0, 2.0: 1.0, 3.0: 2.0, 4.0: 1.0, 5.0: 0.0}


def test_errata6_real_valued_delta_underestimates() -> None:
    # S_{a,perp}, a = 5: the real-line infimum gives 4 instead of 5, which loses 1.25 eps.
    s = system(P4)
    a, b = s.prior_value(USER4, 5), s.prior_absent(USER4)
    assert loss_ratio(a, b, 4.0 / 0.5, 0.5) == pytest.approx(1.25, rel=1e-9)
    assert loss_ratio(a, b, cal.value_presence(5, 0.5).theta, 0.5) <= 1 + 1e-12


# -- fig:Brent (Theorem 3, both conditions, 50 points) -------------------------------------------


@pytest.mark.parametrize(("eps", "printed"), BRENT_RELAXED_CURVE)
def test_fig_brent_relaxed_curve(eps: float, printed: float) -> None:
    assert cal.distribution_presence_relaxed(P4, eps).theta == pytest.approx(printed, rel=1e-9)


@pytest.mark.parametrize(("eps", "printed"), BRENT_BOUND_CURVE)
def test_fig_brent_bound_curve(eps: float, printed: float) -> None:
    assert cal.distribution_presence_bound(P4, eps).theta == pytest.approx(printed, rel=1e-9)


def test_fig_brent_eps_grid_is_linspace() -> None:
    grid = np.linspace(0.1, 1, 50)
    np.testing.assert_allclose([e for e, _ in BRENT_RELAXED_CURVE], grid, rtol=1e-12)


@pytest.mark.parametrize("eps", (0.1, 0.4, 1.0))
def test_relaxed_presence_solves_its_equation_and_is_tight(eps: float) -> None:
    theta = cal.distribution_presence_relaxed(P4, eps).theta
    # E[e^{|D|/theta}] = e^eps, written out for P4 by hand.
    moment = 0.4 * math.exp(1 / theta) + 0.1 * math.exp(2 / theta)
    moment += 0.1 * math.exp(4 / theta) + 0.4 * math.exp(5 / theta)
    assert moment == pytest.approx(math.exp(eps), rel=1e-13)
    # ERRATA tightness table: the relaxed condition is the exact threshold (1.00).
    assert loss_ratio(P4, Distribution.point(0), theta * (1 + 1e-9), eps) <= 1.0
    assert loss_ratio(P4, Distribution.point(0), theta * (1 - 1e-6), eps) > 1.0


@pytest.mark.parametrize("p", (0.05, 0.2, 0.5, 0.9, 1.0))
@pytest.mark.parametrize("eps", (0.05, 0.5, 2.0))
def test_bernoulli_presence_closed_form_matches_brent(p: float, eps: float) -> None:
    closed = cal.distribution_presence_bernoulli(p, eps).theta
    assert closed == pytest.approx(1 / math.log((math.exp(eps) - (1 - p)) / p), rel=1e-12)
    brent = cal.distribution_presence_relaxed(Distribution.bernoulli(p), eps).theta
    assert brent == pytest.approx(closed, rel=1e-12)


def test_bernoulli_presence_p_zero_needs_no_noise() -> None:
    assert cal.distribution_presence_bernoulli(0.0, 0.3).theta == 0.0


# -- fig:SuffCondSPQBinaryRelax (ERRATA 1-3) -----------------------------------------------------


@pytest.mark.parametrize(("eps", "printed"), BINARY_RELAX_BLUE_CURVE)
def test_fig_binary_relax_blue_curve_is_one_over_eps(eps: float, printed: float) -> None:
    theta = cal.distribution_change_binary(BERN_P, BERN_Q, eps).theta
    assert theta == pytest.approx(printed, rel=1e-9)


def _binary_priors() -> tuple[Distribution, Distribution, Distribution]:
    s = system(BERN_P)
    return (
        s.prior_distribution(USER4, BERN_P),
        s.prior_distribution(USER4, BERN_Q),
        s.rest_law(USER4),
    )


@pytest.mark.parametrize(("eps", "printed"), BINARY_RELAX_RED_CURVE)
def test_fig_binary_relax_printed_red_curve_is_not_private(eps: float, printed: float) -> None:
    # ERRATA 1: one constant psi = 91/151 at every eps ...
    assert printed == pytest.approx(
        1 / math.log(math.exp(eps) + math.expm1(eps) * 91 / 151), rel=1e-9
    )
    a, b, _ = _binary_priors()
    # ... and the exact audit of the two priors of X loses about 1.12 eps.
    assert 1.10 < loss_ratio(a, b, printed, eps) < 1.13


@pytest.mark.parametrize(("eps", "printed"), BINARY_RELAX_RED_CURVE)
def test_corrected_binary_relaxed_lemma_passes(eps: float, printed: float) -> None:
    a, b, rest = _binary_priors()
    theta = cal.distribution_change_binary_relaxed(BERN_P, BERN_Q, rest, eps).theta
    # For p < q the minimum psi sits at max supp R + 1, where R = 0: psi = p / (q - p) = 2/7.
    assert theta == pytest.approx(1 / math.log(math.exp(eps) + math.expm1(eps) * 2 / 7), rel=1e-12)
    assert theta > printed
    assert loss_ratio(a, b, theta, eps) <= 1 + 1e-12
    # Tightness table: the corrected Lemma is about 1.11 times the exact theta.
    assert theta / cal.exact(BERN_P, BERN_Q, eps).theta == pytest.approx(1.11, abs=0.01)


def test_errata2_literal_range_of_x_prime_violates_eps() -> None:
    # Line 1020 read literally: x' in {1, ..., |N|} = {1..4}; only x' = 4 has R(x'-1) > 0.
    eps = 0.01
    a, b, rest = _binary_priors()
    psi = ((1 - 0.9) * rest.prob(4.0) / rest.prob(3.0) + 0.2) / (0.9 - 0.2)
    theta = 1 / math.log(math.exp(eps) + math.expm1(eps) * psi)
    assert loss_ratio(a, b, theta, eps) == pytest.approx(1.43, abs=0.01)


def test_corrected_binary_relaxed_p_greater_than_q() -> None:
    # Mirror case (ERRATA 3): psi = (1 - p)/(p - q) at min supp R, R(x'-1) = 0.
    eps = 0.05
    _, _, rest = _binary_priors()
    theta = cal.distribution_change_binary_relaxed(BERN_Q, BERN_P, rest, eps).theta
    psi = (1 - 0.9) / (0.9 - 0.2)
    assert theta == pytest.approx(1 / math.log(math.exp(eps) + math.expm1(eps) * psi), rel=1e-12)
    s = system(BERN_Q)
    a, b = s.prior_distribution(USER4, BERN_Q), s.prior_distribution(USER4, BERN_P)
    assert loss_ratio(a, b, theta, eps) <= 1 + 1e-12


def test_binary_relaxed_equal_laws_need_no_noise() -> None:
    _, _, rest = _binary_priors()
    assert cal.distribution_change_binary_relaxed(BERN_P, BERN_P, rest, 0.1).theta == 0.0


# -- ERRATA 12 and the tightness table ----------------------------------------------------------


@pytest.mark.parametrize("theta", (0.05, 0.3, 1.0, 7.0))
def test_bernoulli_exact_loss_closed_form(theta: float) -> None:
    def side(sign: float) -> float:
        num = 1 - 0.2 + 0.2 * math.exp(sign / theta)
        den = 1 - 0.9 + 0.9 * math.exp(sign / theta)
        return abs(math.log(num / den))

    expected = max(side(1.0), side(-1.0))
    a, b, _ = _binary_priors()
    assert audit(BERN_P, BERN_Q, theta).loss == pytest.approx(expected, rel=1e-12)
    # Whatever the other users are, the system priors lose no more than the own pair.
    assert audit(a, b, theta).loss <= expected * (1 + 1e-12)


def test_bernoulli_noiseless_loss_threshold() -> None:
    l0 = max(abs(math.log(0.2 / 0.9)), abs(math.log(0.8 / 0.1)))
    assert audit(BERN_P, BERN_Q, 0.0).loss == pytest.approx(l0, rel=1e-14)
    assert cal.exact(BERN_P, BERN_Q, l0 * (1 + 1e-9)).theta == 0.0
    assert cal.exact(BERN_P, BERN_Q, l0 * (1 - 1e-3)).theta > 0.0


@pytest.mark.parametrize(("eps", "ratio"), ((0.1, 1.64), (1.0, 1.44)))
def test_tightness_theorem3_bound(eps: float, ratio: float) -> None:
    exact = cal.exact(P4, Distribution.point(0), eps).theta
    assert cal.distribution_presence_bound(P4, eps).theta / exact == pytest.approx(ratio, abs=0.01)


@pytest.mark.parametrize(("eps", "ratio"), ((0.1, 4.0), (1.0, 1.8)))
def test_tightness_theorem4_against_the_population_exact(eps: float, ratio: float) -> None:
    s = system(P4)
    a, b = s.prior_distribution(USER4, P4), s.prior_distribution(USER4, Q4)
    exact = cal.exact(a, b, eps).theta
    assert cal.distribution_change_thm4(P4, Q4, eps).theta / exact == pytest.approx(ratio, abs=0.05)


@pytest.mark.parametrize("eps", (0.1, 1.0))
def test_user_local_exact_covers_the_population(eps: float) -> None:
    s = system(P4)
    local = cal.exact(P4, Q4, eps).theta
    a, b = s.prior_distribution(USER4, P4), s.prior_distribution(USER4, Q4)
    assert audit(a, b, local).loss <= eps
    assert cal.exact(a, b, eps).theta <= local


# -- zetas cancel --------------------------------------------------------------------------------


@pytest.mark.parametrize("eps", (0.1, 1.0))
def test_zetas_change_no_prior_and_no_theta(eps: float) -> None:
    s1, s2 = system(P4, zeta=1.0), system(P4, zeta=0.3)
    users = list(s2.users)
    users[0] = User(zeta=0.05, dist=users[0].dist)
    s2 = MultiUserSystem(users=tuple(users))
    pairs: tuple[Callable[[MultiUserSystem], tuple[Distribution, Distribution]], ...] = (
        lambda s: (s.prior_value(USER4, 5), s.prior_value(USER4, 3)),
        lambda s: (s.prior_value(USER4, 5), s.prior_absent(USER4)),
        lambda s: (s.prior_distribution(USER4, P4), s.prior_absent(USER4)),
        lambda s: (s.prior_distribution(USER4, P4), s.prior_distribution(USER4, Q4)),
    )
    for make in pairs:
        (a1, b1), (a2, b2) = make(s1), make(s2)
        assert (a1, b1) == (a2, b2)
        for rule in (cal.exact, cal.kantorovich):
            assert rule(a1, b1, eps).theta == rule(a2, b2, eps).theta
    rest1 = system(BERN_P, zeta=1.0).rest_law(USER4)
    rest2 = system(BERN_P, zeta=0.2).rest_law(USER4)
    assert rest1 == rest2
    relaxed = cal.distribution_change_binary_relaxed
    assert relaxed(BERN_P, BERN_Q, rest1, eps) == relaxed(BERN_P, BERN_Q, rest2, eps)
