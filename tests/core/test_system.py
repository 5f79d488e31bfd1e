"""Section 3: rest law and the three priors; zetas cancel."""

from __future__ import annotations

import pytest

from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.system import MultiUserSystem, User

B = Distribution.bernoulli


def three_coins(zeta: float = 1.0) -> MultiUserSystem:
    return MultiUserSystem(users=tuple(User(zeta=zeta, dist=B(p)) for p in (0.5, 0.2, 0.9)))


def test_rest_law_by_hand() -> None:
    rest = three_coins().rest_law(0)  # Bernoulli(.2) + Bernoulli(.9)
    assert rest.support == (0.0, 1.0, 2.0)
    assert rest.probs == pytest.approx((0.8 * 0.1, 0.2 * 0.1 + 0.8 * 0.9, 0.2 * 0.9))


def test_priors_by_hand() -> None:
    s = three_coins()
    assert s.prior_value(0, 3).support == (3.0, 4.0, 5.0)
    assert s.prior_absent(0) == s.rest_law(0)
    prior = s.prior_distribution(0, B(0.5))
    assert prior.support == (0.0, 1.0, 2.0, 3.0)
    assert prior.probs[0] == pytest.approx(0.5 * 0.08)
    assert prior.probs[3] == pytest.approx(0.5 * 0.18)


def test_single_user_rest_is_zero() -> None:
    s = MultiUserSystem(users=(User(zeta=1.0, dist=B(0.3)),))
    assert s.rest_law(0) == Distribution.point(0)


def test_zetas_do_not_change_priors() -> None:
    a, b = three_coins(1.0), three_coins(0.01)
    for i in range(3):
        assert a.prior_absent(i) == b.prior_absent(i)
        assert a.prior_value(i, 2) == b.prior_value(i, 2)
        assert a.prior_distribution(i, B(0.7)) == b.prior_distribution(i, B(0.7))


@pytest.mark.parametrize("zeta", (-0.1, 1.5, float("nan")))
def test_bad_zeta(zeta: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        User(zeta=zeta, dist=B(0.5))
    assert info.value.field == "zeta"


def test_bad_system() -> None:
    with pytest.raises(PufferfishInputError) as info:
        MultiUserSystem(users=())
    assert info.value.field == "users"
    with pytest.raises(PufferfishInputError) as info:
        three_coins().rest_law(3)
    assert info.value.field == "i"
