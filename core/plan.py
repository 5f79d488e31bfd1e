"""Public calibration: the release mechanism for a set of group laws, with its privacy map.

Every user belongs to a configured group g with a public law P_g (declared, or a DP estimate
already published). The release adds discrete Laplace noise of scale

    theta = max over every configured group g and every configured pair kind of the
            policy's theta for that group's pairs (docs/privacy.md, "Public calibration"):
    value_change          (delta_max, delta_min) over supp(P_g)         Theorem 1 / exact
    value_presence        (delta_a, delta_0), a = argmax |a| on supp(P_g) Theorem 2 / exact
    distribution_presence (P_g, delta_0)                                 Theorem 3 / exact
    distribution_change   (P_g, P_h) for every other group h             Theorem 4 / exact

so theta is a function of the settings and the laws only, never of who joined or what anyone
reported. With learned laws, each group's law may come with a public L1 radius r_g
(core.learning_radius.radius): then the pairs involving P_g are calibrated for every law within
r_g of it (``group_balls``, docs/privacy.md "Robust calibration over an L1 ball").

``ReleasePlan`` keeps the mechanism and its privacy map together (OpenDP's
Measurement): ``draw`` adds the noise, ``charge`` is what one release costs under sequential
composition (docs/privacy.md, "Composition").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pufferfish_core import validation
from pufferfish_core.budget import composition_charge
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.error_bars import ErrorBar, error_bar
from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.kantorovich import plan_spread
from pufferfish_core.noise import discrete_laplace_units, exact_float, grid_units
from pufferfish_core.policy import calibrate
from pufferfish_core.robust import reach_spread
from pufferfish_core.schedule import (
    Schedule as Schedule,  # the public clock (re-exported: core.plan names)
)
from pufferfish_core.schedule import budget_schedule as budget_schedule
from pufferfish_core.schedule import learning_due as learning_due
from pufferfish_core.schedule import rounds_due as rounds_due
from pufferfish_core.vocabulary import PairKind, Rule


@dataclass(frozen=True)
class ReleasePlan:
    """theta and its privacy map for one configuration and one set of group laws."""

    theta: float
    epsilon: float
    spread: float  # largest |x - x'| of the monotone couplings of the calibrated pairs
    grid_log2: int
    binding_group: str | None
    binding_pair: PairKind | None
    groups: Mapping[str, Mapping[PairKind, float]] = field(default_factory=dict)

    def charge(self) -> float:
        """Budget charge of one release: max(epsilon, spread / theta) (pointwise composition)."""
        return composition_charge(self.spread, self.theta, self.epsilon)

    def noise_sd(self) -> float:
        """Standard deviation of the discrete Laplace noise on the 2**grid_log2 grid."""
        if self.theta == 0:
            return 0.0
        grid = 2.0**self.grid_log2
        q = math.exp(-grid / self.theta)
        return grid * math.sqrt(2.0 * q) / -math.expm1(-grid / self.theta)

    def error_bar(self) -> ErrorBar:
        """sd and 95 % half-width of one release's noise (one draw; core/error_bars.py)."""
        return error_bar(self.theta, self.grid_log2, 1)

    def draw(self, value: float) -> float:
        """value + discrete Laplace noise of scale theta (CSPRNG, exact on the grid), added in
        grid units as the stream adds it. A noisy value beyond 2**53 grid units, which no float
        holds exactly, is refused (PufferfishInputError) rather than rounded, as the stream
        refuses it (core.noise.exact_float); the refusal depends on the noise, so the draw
        counts as made (its charge is spent)."""
        value = validation.on_grid(validation.exact_real(value, "value"), self.grid_log2)
        units = grid_units(value, self.grid_log2)
        assert units is not None  # on the grid
        noisy = exact_float(discrete_laplace_units(units, self.theta, self.grid_log2),
                            self.grid_log2)
        if noisy is None:
            raise PufferfishInputError(
                "value", f"the noisy value is beyond 2**53 grid units of 2**{self.grid_log2}, "
                "which no float holds exactly: refused, not rounded (use a coarser grid_log2)")
        return noisy


def group_pairs(
    kind: PairKind, group: str, laws: Mapping[str, Distribution]
) -> list[tuple[Distribution, Distribution]]:
    """The pairs of priors a member of ``group`` has for one pair kind (module docstring)."""
    law = laws[group]
    support = np.asarray(law.positive_support())
    if kind is PairKind.VALUE_CHANGE:
        if support.size < 2:
            return []
        top, bottom = float(support.max()), float(support.min())
        return [(Distribution.point(top), Distribution.point(bottom))]
    if kind is PairKind.VALUE_PRESENCE:
        top = float(support[np.argmax(np.abs(support))])
        return [] if top == 0.0 else [(Distribution.point(top), point_zero())]
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return [(law, point_zero())]
    return [(law, laws[h]) for h in sorted(laws) if h != group and laws[h] != law]


Ball = tuple[Distribution, Distribution, tuple[float, float]]


def group_balls(
    kind: PairKind,
    group: str,
    laws: Mapping[str, Distribution],
    radii: Mapping[str, float],
    domain: Sequence[float],
) -> list[Ball]:
    """``group_pairs`` when each law P_g is only known up to the L1 ball of radius radii[g]
    (missing: 0) over ``domain``: (first, second, (radius of first, radius of second)).

    A ball of radius > 0 gives mass to every domain point, so the value pairs range over
    supp(P_g) plus the domain: value_change (delta_max, delta_min), value_presence (delta_a,
    delta_0) with a = argmax |a| there (point masses: radii 0). distribution_presence:
    (P_g, delta_0) with radii (r_g, 0); distribution_change: (P_g, P_h) with (r_g, r_h) for
    every other group h — laws published equal are skipped only when both radii are 0.
    """
    r = radii.get(group, 0.0)
    law = laws[group]
    if kind in (PairKind.VALUE_CHANGE, PairKind.VALUE_PRESENCE):
        if r == 0.0:
            return [(a, b, (0.0, 0.0)) for a, b in group_pairs(kind, group, laws)]
        reach = sorted(set(law.support) | set(domain))
        widened = {group: Distribution.from_points(reach, [1.0 / len(reach)] * len(reach))}
        return [(a, b, (0.0, 0.0)) for a, b in group_pairs(kind, group, widened)]
    if kind is PairKind.DISTRIBUTION_PRESENCE:
        return [(law, point_zero(), (r, 0.0))]
    out: list[Ball] = []
    for h in sorted(laws):
        rh = radii.get(h, 0.0)
        if h == group or (laws[h] == law and r == 0.0 and rh == 0.0):
            continue
        out.append((law, laws[h], (r, rh)))
    return out


def release_plan(
    laws: Mapping[str, Distribution],
    pairs: Iterable[PairKind],
    rule: Rule,
    epsilon: float,
    grid_log2: int,
    radii: Mapping[str, float] | None = None,
    domain: Sequence[float] | None = None,
) -> ReleasePlan:
    """theta = max over every group and pair kind (ties: first group, then first pair kind).

    ``radii`` {group: L1 radius of its law} (None or all 0: the laws are taken as exact);
    ``domain`` the points a ball's laws may use (None: the union of every law's support,
    zero-probability points included — learned laws with prior_floor > 0 have support =
    domain already; pass the domain for declared laws). With radii, the spread that the
    charge uses is the sup of the plan spread over the balls (core.robust.reach_spread).
    """
    radii = validation.group_radii(laws, radii)
    wanted = set(pairs)
    kinds = [k for k in PairKind if k in wanted]
    points = _domain(laws, domain)
    theta, spread, binding_group, binding_pair = 0.0, 0.0, None, None
    table: dict[str, dict[PairKind, float]] = {}
    cache: dict[tuple[PairKind, Distribution, Distribution, tuple[float, float]],
                tuple[float, float]] = {}
    for group in sorted(laws):
        row = table.setdefault(group, {})
        for kind in kinds:
            row[kind] = 0.0
            for first, second, ball in group_balls(kind, group, laws, radii, points):
                key = (kind, first, second, ball)
                if key not in cache:
                    got = calibrate(
                        kind, rule, first, second, epsilon, radii=ball, domain=points
                    ).theta
                    if ball == (0.0, 0.0):
                        cache[key] = (got, plan_spread(first, second))
                    else:
                        cache[key] = (got, reach_spread(first, second, *ball, domain=points))
                pair_theta, pair_spread = cache[key]
                row[kind] = max(row[kind], pair_theta)
                spread = max(spread, pair_spread)
                if pair_theta > theta:
                    theta, binding_group, binding_pair = pair_theta, group, kind
    return ReleasePlan(
        theta=theta, epsilon=epsilon, spread=spread, grid_log2=grid_log2,
        binding_group=binding_group, binding_pair=binding_pair, groups=table,
    )


def _domain(
    laws: Mapping[str, Distribution], domain: Sequence[float] | None
) -> tuple[float, ...]:
    if domain is None:
        return tuple(sorted({x for law in laws.values() for x in law.support}))
    return tuple(sorted(set(validation.finite_vector(list(domain), "domain").tolist())))


def radius_failure_bound(groups: int, rounds: int, beta: float) -> float:
    """Union bound on the probability that any learned radius misses its true law:
    min(1, groups * rounds * beta) (docs/privacy.md, "Robust calibration over an L1 ball").

    ``groups`` configured groups each publish one radius per learning round, each of which fails
    with probability <= ``beta`` (core.learning_radius.radius); ``rounds`` is the number of
    learning rounds whose radii the horizon relies on. No rounds (declared priors): 0.
    """
    groups = validation.count(groups, "groups")
    rounds = validation.count(rounds, "learning_rounds")
    if rounds == 0 or groups == 0:
        return 0.0
    return min(1.0, groups * rounds * validation.confidence_beta(beta))
