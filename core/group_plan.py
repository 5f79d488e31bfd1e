"""Per-group releases: each configured group's noisy sum and noisy count, calibrated on that
group's own published law, with the privacy map of the whole vector (docs/privacy.md,
"Per-group releases", which proves every claim here).

One release publishes, for every configured group g (the list is public), y_g = S_g + N_g and
c_g = C_g + M_g: S_g the sum of g's present users' values, C_g their number, N_g and M_g
independent discrete Laplace noise of scales theta_g and kappa_g (core/noise.py).

Which coordinates one user moves (per secret pair kind):
* value_change: S_g only (|delta| <= the spread of g's value pairs); C_g does not move.
* value_presence, distribution_presence: S_g and C_g (by 1).
* distribution_change: the user's law is P_g or P_h for another group h. Read as the group
  itself being secret, the user is a member of g in one world and of h in the other: S_g, C_g,
  S_h and C_h all move. The loss of independent Laplace coordinates adds (their densities
  factorise), so the vector is calibrated with sum over moved coordinates |delta|/scale <= eps.

Calibration: every moved coordinate gets an equal share eps_c = epsilon / (groups moved x
coordinates moved per group) of the release's epsilon, and is calibrated on its own pair by
core.policy.calibrate (the one way to a noise scale): S_g on g's own pairs (presence of P_g in
place of distribution_change), a count on the pair (delta_1, delta_0). A group with a narrow
law gets a smaller theta_g. Where membership is public (no distribution_change) a user moves
one group only: parallel composition, the charge is the largest group's, not their sum.

Charge of one release (pointwise composition over releases, as core.plan.ReleasePlan): under the
coupling of the user's pair every coordinate moves by at most its spread, so the loss is at most
the sum of spread/scale over the coordinates it moves; charge = max(epsilon, that sum over the
worst user). With distribution_change the reading where the user stays in g and only its law
is secret moves S_g alone, by the (P_g, P_h) plan spread: theta_g covers that pair as well.

Tree mode: core/group_tree.py (one sum tree per group and a count tree per window); the worker
still refuses the two together (docs/privacy.md, "Per-group releases in tree mode").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pufferfish_core import validation
from pufferfish_core.budget import composition_charge
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.error_bars import ErrorBar, error_bar, laplace_sum_quantile
from pufferfish_core.plan import release_plan
from pufferfish_core.policy import calibrate
from pufferfish_core.vocabulary import PairKind, Rule

PRESENCE = (PairKind.VALUE_PRESENCE, PairKind.DISTRIBUTION_PRESENCE)
MEAN_LEVEL = 0.95


@dataclass(frozen=True)
class GroupScales:
    """One group's two coordinates: the sum's scale and spread, the count's scale and move."""

    theta_sum: float
    spread_sum: float  # the most one coupled user moves S_g (its own pairs' plan spread)
    theta_count: float
    count_move: float  # 1 when a configured pair moves C_g, else 0
    law_spread: float = 0.0  # distribution_change, law secret within g: the (P_g, P_h) spread

    def loss_bound(self) -> float:
        """sum over the group's moved coordinates of spread / scale (theta_sum > 0)."""
        return self.spread_sum / self.theta_sum + self.count_move / self.theta_count


@dataclass(frozen=True)
class GroupReleasePlan:
    """The per-group release for one configuration and one set of group laws."""

    groups: Mapping[str, GroupScales]
    epsilon: float
    coordinate_epsilon: float  # eps_c: each moved coordinate's share
    group_secret: bool  # distribution_change between two groups: one user moves two groups
    grid_log2: int

    def worst_loss(self) -> float:
        """The worst user's sum of spread/scale over what it moves: the largest group's with
        public membership (parallel composition), the largest two groups' together when the
        group is secret, or the law-secret reading (S_g alone, by the (P_g, P_h) spread)."""
        losses = sorted((g.loss_bound() for g in self.groups.values()), reverse=True)
        worst = sum(losses[:2]) if self.group_secret else losses[0]
        law = max(g.law_spread / g.theta_sum for g in self.groups.values())
        return max(worst, law)

    def charge(self) -> float:
        """max(epsilon, ``worst_loss``): pointwise composition, as core.plan.ReleasePlan."""
        return composition_charge(self.worst_loss(), 1.0, self.epsilon)

    def sum_error_bar(self, group: str) -> ErrorBar:
        return error_bar(self.groups[group].theta_sum, self.grid_log2, 1)

    def count_error_bar(self, group: str) -> ErrorBar:
        return error_bar(self.groups[group].theta_count, self.grid_log2, 1)

    def mean_interval(self, group: str, noisy_sum: float, noisy_count: float,
                      ) -> tuple[float, float] | None:
        """An interval holding S_g / C_g with probability >= 95 % (``mean_interval``), each
        value's noise one draw."""
        g = self.groups[group]
        return mean_interval(noisy_sum, noisy_count, (g.theta_sum, 1), (g.theta_count, 1),
                             self.grid_log2)


def mean_interval(noisy_sum: float, noisy_count: float, sum_draws: tuple[float, int],
                  count_draws: tuple[float, int], grid_log2: int) -> tuple[float, float] | None:
    """An interval holding S / C with probability >= 95 %, a function of the published values
    only: with probability >= 1 - 2 x 2.5 % (union bound) the sum's and the count's noise, each
    the sum of (scale, number) draws, are within their 97.5 % half-widths (core/error_bars.py),
    and S / C then lies between the box's corner ratios. None when the count's lower end is
    <= 0 (unbounded)."""
    level = 1.0 - (1.0 - MEAN_LEVEL) / 2.0
    grid = 2.0 ** grid_log2
    hs, hc = (theta * laplace_sum_quantile(n, level) + n * grid
              for theta, n in (sum_draws, count_draws))
    if noisy_count - hc <= 0:
        return None
    corners = [(noisy_sum + a) / (noisy_count + b) for a in (-hs, hs) for b in (-hc, hc)]
    return min(corners), max(corners)


def readings(laws: Mapping[str, Distribution], pairs: Sequence[PairKind], epsilon: float,
             ) -> tuple[bool, bool, list[PairKind], float]:
    """What the configured pairs move (module docstring): (the group is secret, a count
    moves, the pair kinds of a group's own sum, each moved coordinate's share of epsilon)."""
    kinds = [k for k in PairKind if k in set(pairs)]
    validation.non_empty(kinds, "pairs")
    secret = PairKind.DISTRIBUTION_CHANGE in kinds and len(laws) > 1
    counts = secret or any(k in PRESENCE for k in kinds)
    share = epsilon / ((2 if secret else 1) * (2 if counts else 1))
    own: list[PairKind] = [k for k in kinds if k is not PairKind.DISTRIBUTION_CHANGE]
    if secret and PairKind.DISTRIBUTION_PRESENCE not in own:
        own.append(PairKind.DISTRIBUTION_PRESENCE)
    return secret, counts, own, share


def group_release_plan(
    laws: Mapping[str, Distribution],
    pairs: Sequence[PairKind],
    rule: Rule,
    epsilon: float,
    grid_log2: int,
    radii: Mapping[str, float] | None = None,
    domain: Sequence[float] | None = None,
) -> GroupReleasePlan:
    """theta_g and kappa_g for every group (module docstring); a group whose sum would need no
    noise (theta_g 0: its exact sum would be published) is a PufferfishInputError."""
    epsilon = validation.epsilon(epsilon)
    validation.count_grid(validation.grid_log2(grid_log2))
    radii = validation.group_radii(laws, radii)
    secret, counts, own, share = readings(laws, pairs, epsilon)
    changes = (release_plan(laws, [PairKind.DISTRIBUTION_CHANGE], rule, share, grid_log2, radii,
                            domain) if secret else None)
    count_theta = calibrate(PairKind.VALUE_PRESENCE, rule, Distribution.point(1.0), point_zero(),
                            share).theta
    out: dict[str, GroupScales] = {}
    for group in sorted(laws):
        theta, spread = 0.0, 0.0
        if own:
            alone = release_plan({group: laws[group]}, own, rule, share, grid_log2,
                                 {group: radii.get(group, 0.0)}, domain)
            theta, spread = alone.theta, alone.spread
        law_spread = 0.0
        if changes is not None:
            theta = max(theta, changes.groups[group][PairKind.DISTRIBUTION_CHANGE])
            law_spread = changes.spread
        validation.group_theta(theta, group)
        out[group] = GroupScales(theta, spread, count_theta, 1.0 if counts else 0.0, law_spread)
    return GroupReleasePlan(out, epsilon, share, secret, grid_log2)
