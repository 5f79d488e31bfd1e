"""Per-group releases in tree mode: in every privacy window, each configured group g has a sum
tree at its own scale theta_g and a count tree at kappa, with the privacy map of all of them
together (docs/privacy.md, "Per-group releases in tree mode", which proves every claim here).

The release at a tick publishes, for every group, its sum S_g and count C_g plus the noise of
that tick's draws in the group's two trees (core/tree.py: base + prefix nodes, each node drawn
once). What one user can move in a window (the worker's contribution bound, the same rule as
core.tree_sensitivity.admitted applied to the user's whole contribution):

* its contribution is (group, present, reported value): a join, a leave and a report that
  changes the reported value (the first one included, even of 0) are changes, at most
  w = ``max_changes_per_window`` of them per window; later ones wait for the next window's
  base. Its **group is fixed for the window**: a join into another group waits for the next
  window's base. So a user moves the trees of one group per window (public membership);
* under a value pair both worlds change at the same events (only the value differs), so the
  count does not move and the sum moves as core.tree_sensitivity's one-world range;
* presence pairs (and the secret group's two readings) move the sum and the count of the
  user's group, the other world being absent: one-world ranges, [0, 1] for the count;
* distribution_change read within g (the user's law is secret, its group is not): the two
  worlds' values differ per report, so their changes fall at different events: two-world
  ranges for the sum (spread of the (P_g, P_h) plans) and for the count ({0, 1});
* distribution_change read as the group being secret (a member of g in one world, of h in the
  other): the presence reading in g's trees and in h's.

Calibration: as core/group_plan.py, every tree a reading moves gets an equal share eps_c of the
window's budget (eps with value pairs only, eps/2 when the count moves, eps/4 for the secret
group); a tree's scale is its window sensitivity over every reading it must cover / eps_c
(core.tree.tree_mechanism), so each tree's loss is at most eps_c and a user's, summed over
the trees it moves (the loss of independent Laplace draws adds), at most eps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pufferfish_core import validation
from pufferfish_core.budget import composition_charge
from pufferfish_core.distribution import Distribution
from pufferfish_core.error_bars import ErrorBar, mixed_error_bar
from pufferfish_core.group_plan import mean_interval, readings
from pufferfish_core.plan import release_plan
from pufferfish_core.tree import TreeMechanism, tree_mechanism
from pufferfish_core.vocabulary import PairKind, Rule

COUNT_DOMAIN = (1.0,)  # a present user counts 1 (0 absent: core.tree_sensitivity adds it)


@dataclass(frozen=True)
class GroupTreePlan:
    """One window's trees: each group's sum tree, the count trees' mechanism (one per group,
    all alike), and the charge of the whole window."""

    sums: Mapping[str, TreeMechanism]
    counts: TreeMechanism
    count_moves: bool  # a configured pair moves a count (presence, distribution_change)
    epsilon: float
    coordinate_epsilon: float
    group_secret: bool
    grid_log2: int

    def group_loss(self, group: str) -> float:
        """The most a user of ``group`` can lose on its group's trees in the window: the sum
        tree's sensitivity / scale, plus the count tree's when a pair moves the count."""
        loss = self.sums[group].sensitivity / self.sums[group].scale
        if self.count_moves:
            loss += self.counts.sensitivity / self.counts.scale
        return loss

    def worst_loss(self) -> float:
        """The largest group's loss with public membership (parallel composition), the two
        largest together when the group is secret (the user moves both groups' trees)."""
        losses = sorted((self.group_loss(g) for g in self.sums), reverse=True)
        return sum(losses[:2]) if self.group_secret else losses[0]

    def charge(self) -> float:
        """The window's charge: max(epsilon, ``worst_loss``), spent on its first release."""
        return composition_charge(self.worst_loss(), 1.0, self.epsilon)

    def sum_error_bar(self, group: str, tick: int) -> ErrorBar:
        """The error bar of ``group``'s noisy sum at ``tick``: its sum tree's draws there."""
        return self.sums[group].error_bar_at(tick)

    def count_error_bar(self, tick: int) -> ErrorBar:
        return self.counts.error_bar_at(tick)

    def total_error_bar(self, tick: int) -> ErrorBar:
        """The error bar of the sum of the groups' noisy sums at ``tick`` (post-processing):
        every draw of every group's sum tree at that tick, at its group's scale."""
        thetas = [tree.scale for _, tree in sorted(self.sums.items())
                  for _ in tree.draws(tick)]
        return mixed_error_bar(thetas, self.grid_log2)

    def mean_interval(self, group: str, tick: int, noisy_sum: float, noisy_count: float,
                      ) -> tuple[float, float] | None:
        """An interval holding S_g / C_g with probability >= 95 % at ``tick``
        (core.group_plan.mean_interval, each value's noise that tick's draws in its tree)."""
        sums = self.sums[group]
        return mean_interval(noisy_sum, noisy_count, (sums.scale, len(sums.draws(tick))),
                             (self.counts.scale, len(self.counts.draws(tick))), self.grid_log2)


def group_tree_plan(
    laws: Mapping[str, Distribution],
    pairs: Sequence[PairKind],
    rule: Rule,
    epsilon: float,
    grid_log2: int,
    ticks: int,
    max_changes: int,
    domain: Sequence[float],
    radii: Mapping[str, float] | None = None,
) -> GroupTreePlan:
    """Every group's sum tree and the count tree for a window of ``ticks`` ticks at budget
    ``epsilon`` (module docstring); a group whose sum would need no noise is a
    PufferfishInputError, as in core.group_plan."""
    epsilon = validation.epsilon(epsilon)
    validation.count_grid(validation.grid_log2(grid_log2))
    radii = validation.group_radii(laws, radii)
    points = [float(x) for x in validation.finite_vector(list(domain), "domain")]
    secret, counts, own, share = readings(laws, pairs, epsilon)
    count_kinds = ([PairKind.VALUE_PRESENCE] if counts else []) + (
        [PairKind.DISTRIBUTION_CHANGE] if secret else [])
    law = (release_plan(laws, [PairKind.DISTRIBUTION_CHANGE], rule, share, grid_log2, radii,
                        points).spread if secret else None)
    sums: dict[str, TreeMechanism] = {}
    for group in sorted(laws):
        if not own:
            validation.group_theta(0.0, group)
        spread = release_plan({group: laws[group]}, own, rule, share, grid_log2,
                              {group: radii.get(group, 0.0)}, points).spread
        also = [] if law is None else [([PairKind.DISTRIBUTION_CHANGE], law)]
        tree = tree_mechanism(ticks, max_changes, own, spread, points, share, grid_log2,
                              also=also)
        validation.group_theta(tree.scale, group)
        sums[group] = tree
    # with value pairs only no count moves; it is still published with noise (as
    # core.group_plan does): the presence reading's scale
    count_tree = tree_mechanism(ticks, max_changes, count_kinds or [PairKind.VALUE_PRESENCE],
                                1.0, COUNT_DOMAIN, share, grid_log2)
    return GroupTreePlan(sums, count_tree, counts, epsilon, share, secret, grid_log2)

