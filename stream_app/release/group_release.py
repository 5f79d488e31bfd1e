"""Per-group releases (``release_by_group``; docs/privacy.md, "Per-group releases").

Each release draws, for every configured group g (the settings' group list, public), its exact
sum S_g plus discrete Laplace noise of scale theta_g and its exact count C_g plus noise of
scale kappa_g: the scales of core/group_plan.py for the laws in force, one charge per release
(``GroupReleasePlan.charge``). The exact S_g and C_g come from the partials
(``Partial.group_totals``); they stay in this module's locals. The release's total is the sum
of the groups' noisy sums: post-processing (no draw of its own, no charge), its error bar that
of the sum of the groups' draws (core.error_bars.mixed_error_bar). Every draw is core's
sampler (CSPRNG, exact on the grid).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pufferfish_core.distribution import Distribution
from pufferfish_core.error_bars import ErrorBar, mixed_error_bar
from pufferfish_core.group_plan import GroupReleasePlan
from pufferfish_core.noise import discrete_laplace_units, exact_float, grid_units
from stream_app.domain.models import Partial
from stream_app.domain.outputs import GroupResult
from stream_app.domain.priors import group_plan_for
from stream_app.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupDraw:
    """One release's per-group draws, in grid units (exact until they are published)."""

    sums: Mapping[str, int]  # group -> noisy sum units
    counts: Mapping[str, int]  # group -> noisy count units

    def total_units(self) -> int:
        """The release's noisy_sum: the sum of the groups' noisy sums (exact integers)."""
        return sum(self.sums.values())


@dataclass(frozen=True)
class GroupFields:
    """What a per-group release puts in its record, all public: the groups' results, the
    total's error bar, the largest theta_g and its group."""

    groups: dict[str, GroupResult]
    bar: ErrorBar
    theta: float
    binding_group: str


class GroupReleases:
    """The per-group half of the releaser: its plan for the laws in force, its draws."""

    def __init__(self, settings: Settings, laws: Mapping[str, Distribution],
                 radii: Mapping[str, float]) -> None:
        self.settings = settings
        self.said_old_partials = False
        self.plan = self.calibrate(laws, radii)

    def calibrate(self, laws: Mapping[str, Distribution],
                  radii: Mapping[str, float]) -> GroupReleasePlan:
        """The plan of these laws, and the total's error bar (computed here, with theta, not
        on every release: a function of the scales only)."""
        plan = group_plan_for(self.settings, laws, radii)
        assert plan is not None  # release_by_group is on
        self.plan = plan
        self.thetas = {g: s.theta_sum for g, s in plan.groups.items()}
        self.total_bar = mixed_error_bar(list(self.thetas.values()), plan.grid_log2)
        return plan

    def charge(self) -> float:
        return self.plan.charge()

    def ready(self, partials: Mapping[int, Partial]) -> bool:
        """Every partial carries its group totals (a partial of a worker older than the field
        is replaced when that worker restarts: its aggregates are sent again)."""
        if all(p.group_totals is not None for p in partials.values()):
            return True
        if not self.said_old_partials:
            log.warning("no per-group release yet: a partial without group totals (a worker "
                        "older than release_by_group); the tick is tried again")
            self.said_old_partials = True
        return False

    def draw(self, partials: Mapping[int, Partial]) -> GroupDraw:
        """Each configured group's sum and count plus fresh noise (groups in sorted order)."""
        plan, grid_log2 = self.plan, self.plan.grid_log2
        sums: dict[str, int] = {}
        counts: dict[str, int] = {}
        for group, scales in sorted(plan.groups.items()):
            exact_sum = exact_count = 0
            for p in partials.values():
                got = (p.group_totals or {}).get(group)
                if got is not None:
                    exact_sum += got[0]
                    exact_count += got[1]
            count_units = grid_units(float(exact_count), grid_log2)
            assert count_units is not None  # grid_log2 <= 0 (core.validation.count_grid)
            sums[group] = discrete_laplace_units(exact_sum, scales.theta_sum, grid_log2)
            counts[group] = discrete_laplace_units(count_units, scales.theta_count, grid_log2)
        return GroupDraw(sums, counts)

    def fields(self, drawn: GroupDraw) -> GroupFields | None:
        """The record's per-group fields; None when a noisy value is beyond what a float holds
        exactly (refused, not rounded, as the total is: a decision on noisy values only)."""
        plan, grid_log2 = self.plan, self.plan.grid_log2
        groups: dict[str, GroupResult] = {}
        for group, scales in plan.groups.items():
            noisy_sum = exact_float(drawn.sums[group], grid_log2)
            noisy_count = exact_float(drawn.counts[group], grid_log2)
            if noisy_sum is None or noisy_count is None:
                return None
            bar, count_bar = plan.sum_error_bar(group), plan.count_error_bar(group)
            groups[group] = GroupResult(
                noisy_sum=noisy_sum, theta=scales.theta_sum, noise_sd=bar.noise_sd,
                ci95_half_width=bar.ci95_half_width, noisy_count=noisy_count,
                count_theta=scales.theta_count, count_noise_sd=count_bar.noise_sd,
                count_ci95_half_width=count_bar.ci95_half_width)
        thetas = self.thetas
        binding = max(sorted(thetas), key=thetas.__getitem__)
        return GroupFields(groups, self.total_bar, thetas[binding], binding)
