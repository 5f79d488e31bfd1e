"""``pufferfish plan``: what a configuration will publish, computed offline from the settings.

The same code path as the worker (stream_app.domain.priors.checked_start, core.plan): theta for each
group and pair, the binding pair, the charge per release, the noise standard deviation, and how
long the budget lasts on the public clock. With learned priors theta follows the published
learning rounds; the figures are for the round-0 laws (declared, else uniform).

Failure probability (``failure_probability``, ``failure_bound``): with learned priors each
configured group publishes one radius per learning round, each missing its true law with
probability <= beta = ``prior_confidence_beta`` (core.robust.radius); the guarantee holds except
with probability <= groups * learning_rounds * beta (core.plan.radius_failure_bound, union bound).

The schedule is exact over the whole horizon (core.schedule: closed forms on the exact public
clock, no cap). Learning rounds fall on the ticks after each multiple of learn_period since the
epoch, so the count depends on where the deployment's first tick falls: without privacy windows
the figures are for a first tick just after a learning tick (the fewest rounds), and R is the
most rounds of any first tick (``clock_offset_rounds`` the difference); with windows (window j =
[jW, (j+1)W) since the epoch) every window of the repeating pattern is counted, R = the most
rounds of any window plus the round in force when it opens (learned in an earlier window), and
over k consecutive windows the loss is k x budget_total except with probability <= groups x
(k x rounds + 1) x beta: an unbounded horizon, said in words. Declared priors: 0. Each figure of
the failure bound is a function of the settings (docs/privacy.md, "Learned priors").
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.learning_radius import noise_l1_tail
from pufferfish_core.plan import radius_failure_bound
from pufferfish_core.schedule import Schedule, WindowSchedule, budget_schedule, window_schedule
from stream_app.domain.plan_continual import loss_per_day, mechanisms, tree_mode, tree_window
from stream_app.domain.plan_groups import by_group
from stream_app.domain.plan_text import plan_text
from stream_app.domain.priors import checked_start, group_plan_for, learner_for, plan_for
from stream_app.settings import Settings, arguments, load_settings

DESCRIPTION = ("What a configuration will publish, computed offline from the settings: theta "
               "for each group and pair, the charge per release, the noise standard deviation, "
               "how long the budget lasts on the public clock, and the failure probability of "
               "learned priors.")


def plan_summary(settings: Settings) -> dict[str, Any]:
    """The plan as a JSON-able dict (the ``--json`` output)."""
    s = settings
    priors, plan = checked_start(s)
    groups = group_plan_for(s, priors.laws, priors.radii)
    plain = plan_for(s, priors.laws, {})  # the same laws taken as exact (radius 0)
    learner = learner_for(s)
    charge = plan.charge()
    learn = (learner.charge(), s.learn_period_seconds) if learner else (None, None)
    # no window: from tick 1 (a start at a multiple of learn_period) and from the worst start
    aligned = budget_schedule(s.budget_total, charge, s.release_period_seconds, *learn)
    worst = budget_schedule(s.budget_total, charge, s.release_period_seconds, *learn,
                            worst_phase=True)
    if tree_mode(s):
        windows: WindowSchedule | None = tree_window(s, learner is not None)
    else:
        windows = None if s.budget_window_seconds is None else window_schedule(
            s.budget_total, charge, s.release_period_seconds, s.budget_window_seconds, *learn)
    both = mechanisms(s, plan, windows, learner is not None)
    lasts, lasts_worst = _until_exhausted(aligned, worst, windows)
    if tree_mode(s):
        charge = both["window_charge"]  # at the window's first release; 0 at the others
    failure = _failure(s, len(plan.groups), learner is not None, aligned, worst, windows)
    return {
        "theta": plan.theta,
        "theta_plain": plain.theta,
        "epsilon": s.epsilon,
        "rule": s.rule.value,
        "pairs": [p.value for p in s.pairs],
        "binding_group": plan.binding_group,
        "binding_pair": plan.binding_pair.value if plan.binding_pair else None,
        "spread": plan.spread,
        "charge_per_release": charge,
        **both,
        "budget_total": s.budget_total,
        "release_period_seconds": s.release_period_seconds,
        "releases_until_exhausted": lasts.releases,
        "seconds_until_exhausted": lasts.seconds,
        "schedule_capped": False,  # kept for readers: the schedule has no cap (closed form)
        "prior_source": s.prior_source,
        "window": None if windows is None else _window(s, windows),
        "learning": None if learner is None else {
            "epsilon_learn": learner.epsilon_learn,
            "learn_period_seconds": s.learn_period_seconds,
            "rounds_until_exhausted": lasts.learning_rounds,
            # no window: the most rounds and the fewest releases of any start time
            "rounds_until_exhausted_max": lasts_worst.learning_rounds,
            "releases_until_exhausted_min": lasts_worst.releases,
            "prior_floor": learner.floor,
            "learn_min_mass": learner.min_mass,
            "prior_confidence_beta": s.prior_confidence_beta,
            # a round's radius is void (law kept) unless the group's noisy mass exceeds this
            "noise_tail_users": noise_l1_tail(len(s.domain), s.epsilon_learn,
                                              s.prior_confidence_beta),
        },
        "default_group": priors.default_group,
        "groups": {g: {k.value: t for k, t in row.items()} for g, row in plan.groups.items()},
        "groups_plain": {g: {k.value: t for k, t in row.items()}
                         for g, row in plain.groups.items()},
        "radii": dict(priors.radii),
        "release_by_group": s.release_by_group,
        "by_group": None if groups is None else by_group(s, priors, groups),
        **failure,
        "loss_per_day": loss_per_day(s, failure),
    }


def _until_exhausted(aligned: Schedule, worst: Schedule, windows: WindowSchedule | None
                     ) -> tuple[Schedule, Schedule]:
    """How long the budget lasts, (from tick 1, from the worst start): without windows the
    deployment's whole budget; with windows each window's, the fewest releases and seconds and
    the most learning rounds of any window, for both."""
    if windows is None:
        return aligned, worst
    window = Schedule(releases=windows.releases_min, learning_rounds=windows.rounds_max,
                      seconds=windows.lasts_seconds_min)
    return window, window


def _window(s: Settings, w: WindowSchedule) -> dict[str, Any]:
    return {
        "seconds": s.budget_window_seconds,
        "alignment": "window j covers [j x seconds, (j+1) x seconds) since the epoch; its ticks "
                     "are the k with k x release_period_seconds in it",
        "ticks_per_window": w.ticks_min,
        "ticks_per_window_max": w.ticks_max,
        "releases_per_window": w.releases_min,
        "releases_per_window_max": w.releases_max,
        "learning_rounds_per_window": w.rounds_max,
        "budget_lasts_seconds": w.lasts_seconds_min,
        "runs_out_before_window_end": w.runs_out,
        # exact: every window of the repeating pattern counted; else bounds over every phase
        "exact": w.distinct_windows is not None,
        "distinct_windows": w.distinct_windows,
    }


def _failure(s: Settings, groups: int, learned: bool, aligned: Schedule, worst: Schedule,
             windows: WindowSchedule | None) -> dict[str, Any]:
    """failure_probability, its inputs and the guarantee sentence (module docstring)."""
    beta = s.prior_confidence_beta if learned else None
    if windows is not None:  # the rounds of the window plus the round in force when it opens
        in_horizon, carried, offset = (windows.rounds_max, 1, 0) if learned else (0, 0, 0)
    else:  # the aligned start's rounds plus what another start time can add
        in_horizon = aligned.learning_rounds
        carried, offset = 0, worst.learning_rounds - aligned.learning_rounds
    used = in_horizon + carried + offset
    p = 0.0 if beta is None else radius_failure_bound(groups, used, beta)
    bound = {
        "groups": groups,
        "learning_rounds": used,
        "learning_rounds_in_horizon": in_horizon,
        "carried_in_rounds": carried,
        "clock_offset_rounds": offset,
        "beta_per_round": beta,
        "horizon": "until_exhausted" if windows is None else "window",
        # until_exhausted: the time of the last release (the longest of any start)
        "horizon_seconds": aligned.seconds if windows is None else s.budget_window_seconds,
        "formula": "min(1, groups * learning_rounds * beta_per_round); 0 for declared priors",
        "horizon_unbounded": windows is not None,
        "over_k_windows": None if windows is None else {
            "loss": "k * budget_total",
            "failure_probability": "min(1, groups * (k * learning_rounds_in_horizon + "
                                   "carried_in_rounds) * beta_per_round); 0 for declared priors",
        },
    }
    total = f"budget_total = {s.budget_total:g}"
    tail = ("" if beta is None else
            f", except with probability <= {p:.3g} = {groups} groups x {used} learning rounds x "
            f"beta {beta:g} (a learned radius misses its true law)")
    if windows is not None:
        k_tail = ("" if beta is None else
                  f", except with probability <= min(1, {groups} groups x (k x {in_horizon} + "
                  f"{carried}) learning rounds x beta {beta:g})")
        text = (f"each privacy window of {s.budget_window_seconds:g} s: its outputs are "
                f"({total})-pufferfish private for every configured pair conditionally on the "
                "outputs of earlier windows (their laws, radii and theta carry into the window)"
                f"{tail}; over k consecutive windows the loss is at most k x budget_total"
                f"{k_tail}. The horizon is unbounded: the budget renews every window for as "
                "long as the deployment runs, so no total over its whole life is bounded")
    else:
        text = (f"total loss <= {total} for every configured pair over everything the "
                f"deployment publishes{tail}")
    return {"failure_probability": p, "failure_bound": bound, "guarantee": text}


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments.CommandParser("pufferfish plan", DESCRIPTION)
    arguments.add_config(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        summary = plan_summary(load_settings(args.config))
    except PufferfishInputError as exc:
        print(f"pufferfish: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, allow_nan=False))
    else:
        print(plan_text(summary))
    return 0 if math.isfinite(summary["charge_per_release"]) else 2
