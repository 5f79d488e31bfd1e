"""core/group_plan.py: per-group thetas from each group's own law, count scales, the charge
(parallel composition with public membership), and the vector audit of every coordinate one
user moves, for each pair kind; expected numbers derived here (Proposition 1 by hand, the
grid oracle of tests/oracles.py, exact sums over the noise pmf)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pufferfish_core.auditor import audit_vector
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.group_plan import GroupReleasePlan, group_release_plan
from pufferfish_core.vocabulary import PairKind, Rule
from tests.oracles import discrete_laplace_pmf, grid_loss

EPS = 1.0
DOMAIN = [0.0, 1.0, 2.0, 3.0, 4.0]
NARROW = Distribution.from_points([0.0, 1.0], [0.5, 0.5])
WIDE = Distribution.from_points([0.0, 2.0, 4.0], [0.2, 0.3, 0.5])
LAWS = {"narrow": NARROW, "wide": WIDE}
ONE, ZERO = Distribution.point(1.0), point_zero()


def law_dict(d: Distribution) -> dict[str, list[float]]:
    return {"support": list(d.support), "probs": list(d.probs)}


def plan(pairs: list[PairKind], rule: Rule = Rule.KANTOROVICH,
         laws: dict[str, Distribution] | None = None) -> GroupReleasePlan:
    return group_release_plan(laws or LAWS, pairs, rule, EPS, -10, None, DOMAIN)


def test_presence_each_group_on_its_own_law_and_parallel_charge() -> None:
    """distribution_presence, kantorovich: theta_g = max|x| on supp P_g / (eps/2), the count
    1 / (eps/2); the charge is eps (the largest group's), not groups x eps."""
    got = plan([PairKind.DISTRIBUTION_PRESENCE])
    assert got.groups["narrow"].theta_sum == pytest.approx(1.0 / (EPS / 2))
    assert got.groups["wide"].theta_sum == pytest.approx(4.0 / (EPS / 2))
    assert all(g.theta_count == pytest.approx(2.0 / EPS) for g in got.groups.values())
    assert not got.group_secret and got.charge() == pytest.approx(EPS)


def test_value_change_moves_no_count() -> None:
    got = plan([PairKind.VALUE_CHANGE])
    assert got.coordinate_epsilon == EPS  # one coordinate: the whole epsilon
    assert got.groups["narrow"].theta_sum == pytest.approx(1.0 / EPS)  # max - min
    assert got.groups["wide"].theta_sum == pytest.approx(4.0 / EPS)
    assert {g.count_move for g in got.groups.values()} == {0.0}
    assert got.charge() == pytest.approx(EPS)


@pytest.mark.parametrize("rule", [Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND])
@pytest.mark.parametrize("kind", [PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE,
                                  PairKind.DISTRIBUTION_PRESENCE])
def test_public_membership_vector_audit(rule: Rule, kind: PairKind) -> None:
    """Every user of every group: its sum coordinate (the grid oracle) plus its count
    coordinate (moved by 1 for presence pairs: loss 1/kappa exactly) within epsilon."""
    got = plan([kind], rule)
    for group, law in LAWS.items():
        s = got.groups[group]
        xs = [x for x, p in zip(law.support, law.probs, strict=True) if p > 0]
        if kind is PairKind.VALUE_CHANGE:
            first, second = Distribution.point(max(xs)), Distribution.point(min(xs))
        elif kind is PairKind.VALUE_PRESENCE:
            first, second = Distribution.point(max(xs, key=abs)), ZERO
        else:
            first, second = law, ZERO
        count_loss = 0.0 if kind is PairKind.VALUE_CHANGE else 1.0 / s.theta_count
        oracle = grid_loss(law_dict(first), law_dict(second), s.theta_sum) + count_loss
        assert oracle <= EPS + 1e-9, (group, oracle)
        coords = [(first, second, s.theta_sum)]
        if count_loss:
            coords.append((ONE, ZERO, s.theta_count))
        assert audit_vector(coords).loss == pytest.approx(oracle, abs=1e-9)
    # parallel composition: the charge is the largest group's
    assert got.charge() == pytest.approx(max(EPS, max(g.loss_bound()
                                                     for g in got.groups.values())))


@pytest.mark.parametrize("rule", [Rule.EXACT, Rule.KANTOROVICH, Rule.BOUND])
def test_secret_group_vector_audit(rule: Rule) -> None:
    """distribution_change: a member of g in one world, of h in the other: four coordinates
    move; forward and reverse losses add; each within epsilon for every ordered pair, and the
    law-secret reading (S_g alone, P_g vs P_h) too."""
    laws = {**LAWS, "mid": Distribution.from_points([1.0, 2.0], [0.5, 0.5])}
    got = plan([PairKind.DISTRIBUTION_CHANGE], rule, laws)
    assert got.group_secret and got.coordinate_epsilon == EPS / 4
    for g, pg in laws.items():
        for h, ph in laws.items():
            if g == h:
                continue
            sg, sh = got.groups[g], got.groups[h]
            # world A: in g with value ~ P_g; world B: in h with value ~ P_h
            fwd = (grid_loss(law_dict(pg), law_dict(ZERO), sg.theta_sum) + 1 / sg.theta_count
                   + grid_loss(law_dict(ZERO), law_dict(ph), sh.theta_sum) + 1 / sh.theta_count)
            assert fwd <= EPS + 1e-9, (g, h, fwd)
            vector = audit_vector([(pg, ZERO, sg.theta_sum), (ONE, ZERO, sg.theta_count),
                                   (ZERO, ph, sh.theta_sum), (ZERO, ONE, sh.theta_count)])
            assert vector.loss <= EPS + 1e-9
            assert grid_loss(law_dict(pg), law_dict(ph), sg.theta_sum) <= EPS + 1e-9
    losses = sorted((s.loss_bound() for s in got.groups.values()), reverse=True)
    assert got.charge() >= losses[0] + losses[1] - 1e-12  # two groups move together


def test_narrow_law_gets_less_noise_and_one_group_is_never_secret() -> None:
    got = plan([PairKind.DISTRIBUTION_PRESENCE], Rule.EXACT)
    assert got.groups["narrow"].theta_sum < got.groups["wide"].theta_sum
    alone = plan([PairKind.DISTRIBUTION_CHANGE, PairKind.DISTRIBUTION_PRESENCE],
                 laws={"only": WIDE})
    assert not alone.group_secret and alone.coordinate_epsilon == EPS / 2


def test_a_group_whose_sum_needs_no_noise_is_refused() -> None:
    with pytest.raises(PufferfishInputError, match="release_by_group.*'point'"):
        plan([PairKind.VALUE_CHANGE], laws={"point": Distribution.point(2.0), "wide": WIDE})


def test_a_grid_coarser_than_one_is_refused_for_the_counts() -> None:
    """The counts are integers on the noise grid: 2**1 does not hold 1."""
    with pytest.raises(PufferfishInputError, match="release_by_group.*grid_log2 <= 0"):
        group_release_plan(LAWS, [PairKind.DISTRIBUTION_PRESENCE], Rule.EXACT, EPS, 1, None,
                           DOMAIN)
    assert group_release_plan(LAWS, [PairKind.DISTRIBUTION_PRESENCE], Rule.EXACT, EPS, 0, None,
                              DOMAIN).grid_log2 == 0


def test_mean_interval_covers_by_exact_summation() -> None:
    """Pr[S/C in the interval of (S + N, C + M)] >= 95 %, summed over the pmfs of N and M on
    a coarse grid (g = 1); None when the count's lower end reaches 0."""
    got = group_release_plan({"g": NARROW}, [PairKind.DISTRIBUTION_PRESENCE], Rule.KANTOROVICH,
                             0.5, 0, None, [0.0, 1.0])
    s = got.groups["g"]
    exact_sum, exact_count = 30.0, 40.0
    ns, ps = discrete_laplace_pmf(s.theta_sum, 1.0)
    nc, pc = discrete_laplace_pmf(s.theta_count, 1.0)
    keep_s, keep_c = ps > 1e-13, pc > 1e-13
    covered = 0.0
    for n, p in zip(ns[keep_s], ps[keep_s], strict=True):
        for m, q in zip(nc[keep_c], pc[keep_c], strict=True):
            box = got.mean_interval("g", exact_sum + n, exact_count + m)
            if box is None or box[0] <= exact_sum / exact_count <= box[1]:
                covered += p * q
    assert covered >= 0.95
    assert got.mean_interval("g", 3.0, 1.0) is None
    assert math.isfinite(np.float64(got.mean_interval("g", 30.0, 40.0)[1]))  # type: ignore[index]
