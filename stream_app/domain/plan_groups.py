"""The per-group part of ``pufferfish plan`` (``release_by_group``): each group's theta, the sd
and 95 % half-width of its noisy sum and noisy count, the charge, the mean's interval, and the
total by post-processing against a total published jointly at the same budget (measured here:
the plan says which has less error). The maths is core/group_plan.py and core/error_bars.py.
"""

from __future__ import annotations

import math
from typing import Any

from pufferfish_core.group_plan import GroupReleasePlan, group_release_plan
from pufferfish_core.plan import release_plan
from stream_app.domain.priors import PublicPriors
from stream_app.settings import Settings

MEAN = ("sum / count of the group's noisy values (post-processing, no charge); 95 % interval: "
        "the box of both values within their 97.5 % half-widths, its corner ratios; unbounded "
        "while the count's lower end is <= 0")


def by_group(settings: Settings, priors: PublicPriors, plan: GroupReleasePlan) -> dict[str, Any]:
    """The ``by_group`` object of ``pufferfish plan --json``."""
    s = settings
    rows = {}
    for group, scales in plan.groups.items():
        total_bar, count_bar = plan.sum_error_bar(group), plan.count_error_bar(group)
        rows[group] = {
            "theta_sum": scales.theta_sum, "noise_sd_sum": total_bar.noise_sd,
            "ci95_half_width_sum": total_bar.ci95_half_width,
            "theta_count": scales.theta_count, "noise_sd_count": count_bar.noise_sd,
            "ci95_half_width_count": count_bar.ci95_half_width,
            "count_moves": scales.count_move > 0,
        }
    post = math.sqrt(sum(r["noise_sd_sum"] ** 2 for r in rows.values()))
    # a total published in the same release is one more coordinate every user moves: the
    # groups and the total share the release's epsilon, half each
    half = s.epsilon / 2
    total = release_plan(priors.laws, s.pairs, s.rule, half, s.grid_log2, priors.radii, s.domain)
    halved = group_release_plan(priors.laws, s.pairs, s.rule, half, s.grid_log2, priors.radii,
                                s.domain)
    joint_groups = max(halved.sum_error_bar(g).noise_sd / rows[g]["noise_sd_sum"]
                       for g in rows)
    joint = total.error_bar().noise_sd
    return {
        "charge_per_release": plan.charge(),
        "coordinate_epsilon": plan.coordinate_epsilon,
        "group_secret": plan.group_secret,
        "composition": ("two groups per user (distribution_change: the group is secret)"
                        if plan.group_secret else "parallel (public membership: the largest "
                        "group's charge)"),
        "groups": rows,
        "mean": MEAN,
        "total": {
            "noise_sd_post_processing": post,
            "noise_sd_joint": joint,
            "joint_widens_groups_sd_by": joint_groups,
            "less_error": "post_processing" if post <= joint else "joint",
        },
    }


def by_group_lines(summary: dict[str, Any] | None) -> list[str]:
    """The text lines of ``by_group`` (none when release_by_group is off)."""
    if summary is None:
        return []
    lines = [f"per group (release_by_group): charge per release "
             f"{summary['charge_per_release']:.6g}, {summary['composition']}, each moved "
             f"coordinate at epsilon {summary['coordinate_epsilon']:.6g}",
             f"{'group':<16} {'theta sum':>10} {'sd sum':>10} {'± 95 %':>10} "
             f"{'theta count':>12} {'sd count':>10} {'± 95 %':>10}"]
    for group, r in summary["groups"].items():
        lines.append(f"{group:<16} {r['theta_sum']:>10.6g} {r['noise_sd_sum']:>10.6g} "
                     f"{r['ci95_half_width_sum']:>10.6g} {r['theta_count']:>12.6g} "
                     f"{r['noise_sd_count']:>10.6g} {r['ci95_half_width_count']:>10.6g}")
    t = summary["total"]
    lines += [f"mean per group: {summary['mean']}",
              f"total: sd {t['noise_sd_post_processing']:.6g} as the sum of the groups' noisy "
              f"sums (post-processing), {t['noise_sd_joint']:.6g} published jointly at half the "
              f"budget (which also widens every group's sd {t['joint_widens_groups_sd_by']:.3g}x)"
              f": {t['less_error'].replace('_', '-')} has less error"]
    return lines
