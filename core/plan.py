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
reported. ``ReleasePlan`` keeps the mechanism and its privacy map together (OpenDP's
Measurement): ``draw`` adds the noise, ``charge`` is what one release costs under sequential
composition (docs/privacy.md, "Composition").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from core.budget import composition_charge
from core.distribution import Distribution, point_zero
from core.errors import PufferfishInputError
from core.kantorovich import plan_spread
from core.noise import secure_laplace_release
from core.policy import PairKind, Rule, calibrate


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

    def draw(self, value: float) -> float:
        """value + discrete Laplace noise of scale theta (CSPRNG, exact on the grid)."""
        return secure_laplace_release(value, self.theta, self.grid_log2)


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


def release_plan(
    laws: Mapping[str, Distribution],
    pairs: Iterable[PairKind],
    rule: Rule,
    epsilon: float,
    grid_log2: int,
) -> ReleasePlan:
    """theta = max over every group and pair kind (ties: first group, then first pair kind)."""
    if not laws:
        raise PufferfishInputError("groups", "at least one group with a law is needed")
    wanted = set(pairs)
    kinds = [k for k in PairKind if k in wanted]
    theta, spread, binding_group, binding_pair = 0.0, 0.0, None, None
    table: dict[str, dict[PairKind, float]] = {}
    cache: dict[tuple[PairKind, Distribution, Distribution], tuple[float, float]] = {}
    for group in sorted(laws):
        row = table.setdefault(group, {})
        for kind in kinds:
            row[kind] = 0.0
            for first, second in group_pairs(kind, group, laws):
                key = (kind, first, second)
                if key not in cache:
                    got = calibrate(kind, rule, first, second, epsilon).theta
                    cache[key] = (got, plan_spread(first, second))
                pair_theta, pair_spread = cache[key]
                row[kind] = max(row[kind], pair_theta)
                spread = max(spread, pair_spread)
                if pair_theta > theta:
                    theta, binding_group, binding_pair = pair_theta, group, kind
    return ReleasePlan(
        theta=theta, epsilon=epsilon, spread=spread, grid_log2=grid_log2,
        binding_group=binding_group, binding_pair=binding_pair, groups=table,
    )


@dataclass(frozen=True)
class Schedule:
    """How long a budget lasts on the public clock (``exhausted_by_cap``: the cap was hit)."""

    releases: int
    learning_rounds: int
    seconds: float  # time of the last affordable tick (0 when none is)
    exhausted_by_cap: bool = False


def rounds_due(tick: int, release_period: float, learn_period: float) -> int:
    """Learning rounds due by release tick ``tick`` (1, 2, ...): one on the first tick at or
    after each multiple of learn_period."""
    return math.floor(tick * release_period / learn_period + 1e-9)


def learning_due(tick: int, release_period: float, learn_period: float | None) -> bool:
    if learn_period is None or tick < 1:
        return False
    due = rounds_due(tick, release_period, learn_period)
    return due > rounds_due(tick - 1, release_period, learn_period)


def budget_schedule(
    total: float,
    release_charge: float,
    release_period: float,
    learn_charge: float | None = None,
    learn_period: float | None = None,
    max_ticks: int = 200_000,
) -> Schedule:
    """Replay the worker's clock on an Accountant: each tick learns first when due, then
    releases; the first charge that does not fit ends everything (as in the worker)."""
    from core.budget import Accountant

    accountant = Accountant(total)
    releases = rounds = 0
    last = 0.0
    for tick in range(1, max_ticks + 1):
        if learn_charge is not None and learning_due(tick, release_period, learn_period):
            if not accountant.can_spend(learn_charge):
                return Schedule(releases, rounds, last)
            accountant.spend(learn_charge)
            rounds += 1
        if not accountant.can_spend(release_charge):
            return Schedule(releases, rounds, last)
        accountant.spend(release_charge)
        releases += 1
        last = tick * release_period
    return Schedule(releases, rounds, last, exhausted_by_cap=accountant.can_spend(release_charge))
