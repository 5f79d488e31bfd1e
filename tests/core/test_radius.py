"""core.learning_radius.radius: the public L1 radius of a learned law, by simulation.

The claims: Pr(|Z|_1 > T) <= beta for the learner's discrete Laplace noise on K bins, and the
true law of a group lies within r of the published one in at least a 1 - beta fraction of
rounds. Both are checked against simulated noise (numpy's geometric differences for the tail,
the learner itself with the CKS20 sampler for the coverage), up to simulation error; the tail
check also shows T is not loose by a large factor, so a wrong unit would fail.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pufferfish_core.distribution import Distribution
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.learning import SHARE_UNITS, HistogramLearner, user_share
from pufferfish_core.learning_radius import noise_l1_tail, radius

SIGMAS = 5  # a correct implementation fails a frequency check below at p < ~1e-6


def discrete_laplace(t: float, size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Pr[Z = z] ~ e^{-|z|/t} on the integers: the difference of two i.i.d. geometrics."""
    p = -math.expm1(-1.0 / t)
    return rng.geometric(p, size) - rng.geometric(p, size)


def test_numpy_reference_sampler_has_the_discrete_laplace_law() -> None:
    rng = np.random.default_rng(0)
    t = 1.5
    z = discrete_laplace(t, (200_000, 1), rng).ravel()
    q = math.exp(-1 / t)
    for m in (0, 1, 3):  # Pr[Z = m] = (1 - q) / (1 + q) q^m
        want = (1 - q) / (1 + q) * q**m
        sd = math.sqrt(want * (1 - want) / z.size)
        assert abs(float(np.mean(z == m)) - want) < SIGMAS * sd


@pytest.mark.parametrize(("t", "k", "beta"), [(0.4, 3, 0.1), (3.0, 5, 0.05), (400.0, 8, 0.02)])
def test_l1_tail_holds_and_is_not_loose(t: float, k: int, beta: float) -> None:
    eps = 2 * SHARE_UNITS / t  # the learner's scale in units is 2/eps * 2**16 = t
    tail_units = noise_l1_tail(k, eps, beta) * SHARE_UNITS
    rng = np.random.default_rng(int(t * 10) + k)
    n = 40_000
    l1 = np.abs(discrete_laplace(t, (n, k), rng)).sum(axis=1)
    over = float(np.mean(l1 > tail_units))
    sd = math.sqrt(beta * (1 - beta) / n)
    assert over <= beta + SIGMAS * sd
    if t > 100:  # continuous regime: Gamma(K, t) + K is nearly exact
        assert over >= beta / 2


def test_tail_hand_value_for_one_bin() -> None:
    # K = 1: Gamma(1, 1) is Exp(1), quantile -log(beta); T = (t * -log(beta) + 1) / 2**16.
    for eps, beta in ((0.1, 1e-6), (1.0, 0.05)):
        want = (2 / eps * SHARE_UNITS * -math.log(beta) + 1) / SHARE_UNITS
        assert noise_l1_tail(1, eps, beta) == pytest.approx(want, rel=1e-8)
        assert noise_l1_tail(1, eps, beta) >= want


def test_radius_hand_values_and_void() -> None:
    t = noise_l1_tail(4, 0.5, 1e-3)
    got = radius(10 * t, 4, 0.5, 0.0, 1e-3)
    assert got.r == pytest.approx(0.2) and not got.void and got.tail == t
    floored = radius(10 * t, 4, 0.5, 0.2, 1e-3)  # 0.8 * 0.2 + 2 * 0.2 * 3/4
    assert floored.r == pytest.approx(0.16 + 0.3)
    for mass in (t, 0.5 * t, 0.0, -3.0):
        void = radius(mass, 4, 0.5, 0.2, 1e-3)
        assert void.void and void.r == pytest.approx(0.8 * 2 + 0.3)
    assert radius(1e12, 4, 0.5, 0.0, 1e-3).r < 1e-6
    assert radius(1.01 * t, 4, 0.5, 1.0, 1e-3).r == pytest.approx(1.5)  # all floor: |u - P|


def simulate_groups(
    learner: HistogramLearner, sizes: list[int], rng: np.random.Generator
) -> tuple[dict[str, Distribution], dict[str, list[int]]]:
    """Synthetic groups: each member reports a few values from a group-specific law."""
    k = len(learner.domain)
    truth: dict[str, Distribution] = {}
    sums: dict[str, list[int]] = {}
    for i, n in enumerate(sizes):
        base = rng.dirichlet(np.full(k, 0.5))
        total = np.zeros(k, dtype=np.int64)
        for _ in range(n):
            counts = rng.multinomial(int(rng.integers(1, 6)), base)
            total += np.array(user_share(counts.tolist()))
        name = f"g{i:04d}"
        sums[name] = total.tolist()
        truth[name] = Distribution.from_points(list(learner.domain), (total / total.sum()).tolist())
    return truth, sums


@pytest.mark.parametrize("floor", [0.0, 0.1])
def test_true_law_lies_within_the_radius(floor: float) -> None:
    beta, eps = 0.05, 1.0
    learner = HistogramLearner((0.0, 1.0, 2.0, 3.0), eps, floor, 0.0)
    rng = np.random.default_rng(7 + int(floor * 10))
    sizes = [int(n) for n in rng.choice([3, 30, 60, 150, 400], size=600)]
    truth, sums = simulate_groups(learner, sizes, rng)
    start = {g: Distribution.from_points([0, 1, 2, 3], [0.25] * 4) for g in truth}
    drawn = learner.draw(sums, start)
    covered = trials = 0
    ratios = []
    for g, got in drawn.items():
        rad = radius(got.noisy_mass, 4, eps, floor, beta)
        assert rad.void == (got.noisy_mass <= rad.tail)
        if got.kept or rad.void:
            continue
        dist = float(np.abs(np.array(got.law.probs) - np.array(truth[g].probs)).sum())
        trials += 1
        covered += dist <= rad.r
        ratios.append(dist / rad.r)
    assert trials > 400
    sd = math.sqrt(beta * (1 - beta) / trials)
    assert covered / trials >= 1 - beta - SIGMAS * sd
    assert max(ratios) > 0.1  # the radius is not loose by orders of magnitude


@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5, 2.0, math.nan, math.inf])
def test_bad_beta_is_refused(beta: float) -> None:
    with pytest.raises(PufferfishInputError) as info:
        radius(100.0, 4, 1.0, 0.1, beta)
    assert info.value.field == "prior_confidence_beta"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((100.0, 0, 1.0, 0.1, 1e-6), "k"),
        ((100.0, 2.5, 1.0, 0.1, 1e-6), "k"),
        ((100.0, 4, 0.0, 0.1, 1e-6), "epsilon_learn"),
        ((100.0, 4, 1.0, 1.5, 1e-6), "prior_floor"),
        ((math.nan, 4, 1.0, 0.1, 1e-6), "noisy_mass"),
    ],
)
def test_bad_radius_inputs_are_refused(args: tuple[float, ...], field: str) -> None:
    with pytest.raises(PufferfishInputError) as info:
        radius(*args)  # type: ignore[arg-type]
    assert info.value.field == field
