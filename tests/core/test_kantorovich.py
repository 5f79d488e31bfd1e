"""Monotone plan, its spread and Delta*, checked against a north-west-corner loop."""

from __future__ import annotations

import numpy as np
import pytest

from pufferfish_core.distribution import Distribution
from pufferfish_core.kantorovich import delta_star, monotone_plan, plan_spread


def north_west_corner(p: Distribution, q: Distribution) -> tuple[np.ndarray, np.ndarray]:
    """Textbook transport loop: move mass left to right, independent of the CDF formula."""
    points = sorted(set(p.support) | set(q.support))
    index = {x: k for k, x in enumerate(points)}
    supply = [[index[x], w] for x, w in zip(p.support, p.probs, strict=True) if w > 0]
    demand = [[index[x], w] for x, w in zip(q.support, q.probs, strict=True) if w > 0]
    plan = np.zeros((len(points), len(points)))
    i = j = 0
    while i < len(supply) and j < len(demand):
        moved = min(supply[i][1], demand[j][1])
        plan[int(supply[i][0]), int(demand[j][0])] += moved
        supply[i][1] -= moved
        demand[j][1] -= moved
        if supply[i][1] <= 1e-13:
            i += 1
        if demand[j][1] <= 1e-13:
            j += 1
    return np.array(points), plan


def random_pair(rng: np.random.Generator, k: int) -> tuple[Distribution, Distribution]:
    xs = rng.choice(np.arange(-15, 16), size=k, replace=False)
    ys = rng.choice(np.arange(-15, 16), size=k, replace=False)
    return (
        Distribution.from_points(xs.tolist(), rng.dirichlet(np.full(k, 0.7)).tolist()),
        Distribution.from_points(ys.tolist(), rng.dirichlet(np.full(k, 0.7)).tolist()),
    )


@pytest.mark.parametrize("seed", range(40))
def test_plan_matches_north_west_corner(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p, q = random_pair(rng, int(rng.integers(1, 12)))
    points, expected = north_west_corner(p, q)
    plan = monotone_plan(p, q)
    np.testing.assert_array_equal(plan.points, points)
    np.testing.assert_allclose(plan.matrix, expected, atol=1e-12)
    # marginals
    np.testing.assert_allclose(plan.matrix.sum(axis=1), [p.prob(x) for x in points], atol=1e-12)
    np.testing.assert_allclose(plan.matrix.sum(axis=0), [q.prob(x) for x in points], atol=1e-12)
    rows, cols = np.nonzero(expected > 1e-12)
    assert plan_spread(p, q) == np.max(np.abs(points[rows] - points[cols]))
    assert max(delta_star(p, q).values()) == plan_spread(p, q)
    assert plan_spread(p, q) == plan_spread(q, p)


def test_errata7_monotone_plan_not_any_w1_minimiser() -> None:
    # P uniform {0,1}, Q uniform {1,2}: 0->2, 1->1 also costs W1 = 1 but spreads 2.
    p = Distribution.from_points([0, 1], [0.5, 0.5])
    q = Distribution.from_points([1, 2], [0.5, 0.5])
    assert plan_spread(p, q) == 1.0
    plan = monotone_plan(p, q)
    assert plan.matrix[0, 1] == 0.5 and plan.matrix[1, 2] == 0.5


def test_point_masses_and_identical_laws() -> None:
    assert plan_spread(Distribution.point(1), Distribution.point(0)) == 1.0
    assert delta_star(Distribution.point(1), Distribution.point(0)) == {0.0: 1.0, 1.0: 0.0}
    d = Distribution.from_points([1, 5, 9], [0.2, 0.3, 0.5])
    assert plan_spread(d, d) == 0.0
    assert set(delta_star(d, d).values()) == {0.0}


def test_zero_mass_points_are_not_plan_support() -> None:
    p = Distribution.from_points([0, 100], [1.0, 0.0])
    q = Distribution.from_points([0, 1], [0.5, 0.5])
    assert plan_spread(p, q) == 1.0


def test_plan_spread_on_float_support() -> None:
    p = Distribution.from_points([0.1, 0.7], [0.3, 0.7])
    q = Distribution.from_points([0.2, 0.3], [0.5, 0.5])
    # levels: (0,.3] 0.1->0.2; (.3,.5] 0.7->0.2; (.5,1] 0.7->0.3
    assert plan_spread(p, q) == pytest.approx(0.5, abs=1e-15)
