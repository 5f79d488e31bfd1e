"""``pufferfish plan``: what a configuration will publish, computed offline from the settings.

The same code path as the worker (stream_app.domain.priors.checked_start, core.plan): theta for each
group and pair, the binding pair, the charge per release, the noise standard deviation, and how
long the budget lasts on the public clock. With learned priors theta follows the published
learning rounds; the figures are for the round-0 laws (declared, else uniform).

Failure probability (``failure_probability``, ``failure_bound``): with learned priors each
configured group publishes one radius per learning round, each missing its true law with
probability <= beta = ``prior_confidence_beta`` (core.robust.radius); the guarantee holds except
with probability <= groups * learning_rounds * beta (core.plan.radius_failure_bound, union bound).
Horizon: without privacy windows, until the budget is exhausted (nothing is published after);
with windows, one window: the rounds the plan counts in it plus the round in force when it opens
(learned in an earlier window). Declared priors: 0. The releases topic does not carry it: the
plan's formula and its public inputs do (docs/privacy.md, "Learned priors").
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from typing import Any

from core.errors import PufferfishInputError
from core.learning_radius import noise_l1_tail
from core.plan import Schedule, budget_schedule, radius_failure_bound
from stream_app.domain.priors import checked_start, learner_for, plan_for
from stream_app.settings import Settings, arguments, load_settings

DESCRIPTION = ("What a configuration will publish, computed offline from the settings: theta "
               "for each group and pair, the charge per release, the noise standard deviation, "
               "how long the budget lasts on the public clock, and the failure probability of "
               "learned priors.")


def plan_summary(settings: Settings) -> dict[str, Any]:
    """The plan as a JSON-able dict (the ``--json`` output)."""
    s = settings
    priors, plan = checked_start(s)
    plain = plan_for(s, priors.laws, {})  # the same laws taken as exact (radius 0)
    learner = learner_for(s)
    charge = plan.charge()
    ticks = None if s.budget_window_seconds is None else math.floor(
        s.budget_window_seconds / s.release_period_seconds + 1e-9)
    schedule = budget_schedule(
        s.budget_total, charge, s.release_period_seconds,
        learner.charge() if learner else None, s.learn_period_seconds if learner else None,
        **({} if ticks is None else {"max_ticks": ticks}),
    )
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
        "noise_sd": plan.noise_sd(),
        "budget_total": s.budget_total,
        "release_period_seconds": s.release_period_seconds,
        "releases_until_exhausted": schedule.releases,
        "seconds_until_exhausted": schedule.seconds,
        "schedule_capped": schedule.exhausted_by_cap,
        "prior_source": s.prior_source,
        "window": None if ticks is None else {
            "seconds": s.budget_window_seconds,
            "ticks_per_window": ticks,
            "releases_per_window": schedule.releases,
            "learning_rounds_per_window": schedule.learning_rounds,
            "budget_lasts_seconds": schedule.seconds,
            "runs_out_before_window_end": schedule.releases < ticks,
        },
        "learning": None if learner is None else {
            "epsilon_learn": learner.epsilon_learn,
            "learn_period_seconds": s.learn_period_seconds,
            "rounds_until_exhausted": schedule.learning_rounds,
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
        **_failure(s, len(plan.groups), schedule.learning_rounds if learner else None, ticks,
                   schedule),
    }


def _failure(s: Settings, groups: int, rounds: int | None, ticks: int | None,
             schedule: Schedule) -> dict[str, Any]:
    """failure_probability, its inputs and the guarantee sentence (module docstring)."""
    windowed = ticks is not None
    # Per window: the round in force when the window opens (learned earlier), and one more
    # because the worker's learning clock starts at the worker's start, not at the window's
    # (a window can hold one round more than the aligned count `rounds`).
    carried, offset = (1, 1) if windowed and rounds is not None else (0, 0)
    if rounds is None:  # declared priors: no radius is learned, nothing can miss
        used, beta = 0, None
    else:
        used, beta = rounds + carried + offset, s.prior_confidence_beta
    p = 0.0 if beta is None else radius_failure_bound(groups, used, beta)
    bound = {
        "groups": groups,
        "learning_rounds": used,
        "learning_rounds_in_horizon": 0 if rounds is None else rounds,
        "carried_in_rounds": carried,
        "clock_offset_rounds": offset,
        "beta_per_round": beta,
        "horizon": "window" if windowed else "until_exhausted",
        # until_exhausted: the time of the last release (schedule_capped: the replay's cap)
        "horizon_seconds": s.budget_window_seconds if windowed else schedule.seconds,
        "formula": "min(1, groups * learning_rounds * beta_per_round); 0 for declared priors",
    }
    total = f"budget_total = {s.budget_total:g}"
    tail = ("" if beta is None else
            f", except with probability <= {p:.3g} = {groups} groups x {used} learning rounds x "
            f"beta {beta:g} (a learned radius misses its true law)")
    if windowed:
        text = (f"each privacy window of {s.budget_window_seconds:g} s: its outputs are "
                f"({total})-pufferfish private for every configured pair conditionally on the "
                "outputs of earlier windows (their laws, radii and theta carry into the window)"
                f"{tail}; over k windows the loss is at most k x budget_total")
    else:
        text = (f"total loss <= {total} for every configured pair over everything the "
                f"deployment publishes{tail}")
    return {"failure_probability": p, "failure_bound": bound, "guarantee": text}


def _text(summary: dict[str, Any]) -> str:
    lines = [f"{'group':<16} {'radius':>7} {'pair':<24} {'theta':>10} {'plain theta':>12}"]
    for group, row in summary["groups"].items():
        for pair, theta in row.items():
            plain = summary["groups_plain"][group][pair]
            lines.append(f"{group:<16} {summary['radii'][group]:>7.4g} {pair:<24} "
                         f"{theta:>10.6g} {plain:>12.6g}")
    learning, window = summary["learning"], summary["window"]
    lines += [
        "",
        f"theta {summary['theta']:.6g} (plain, radius 0: {summary['theta_plain']:.6g}; "
        f"binding: group {summary['binding_group']}, "
        f"pair {summary['binding_pair']}; rule {summary['rule']}, epsilon {summary['epsilon']:g})",
        f"noise standard deviation {summary['noise_sd']:.6g}",
        f"charge per release {summary['charge_per_release']:.6g} "
        f"(epsilon {summary['epsilon']:g}; more when spread/theta is larger: docs/privacy.md)",
        f"budget {summary['budget_total']:g}: {summary['releases_until_exhausted']} releases, "
        f"{summary['seconds_until_exhausted']:g} s at one per "
        f"{summary['release_period_seconds']:g} s"
        + ("" if learning is None else
           f", with {learning['rounds_until_exhausted']} learning rounds of epsilon_learn "
           f"{learning['epsilon_learn']:g} every {learning['learn_period_seconds']:g} s"),
    ]
    if window is not None:
        lines.append(
            f"privacy window {window['seconds']:g} s (budget_total per window): "
            f"{window['releases_per_window']} of {window['ticks_per_window']} ticks release, "
            f"the budget lasts {window['budget_lasts_seconds']:g} s of each window")
        if window["runs_out_before_window_end"]:
            lines.append("warning: the budget runs out before the window ends: no release "
                         "for the rest of each window (raise budget_total, lower epsilon, "
                         "or shorten the window)")
    bound = summary["failure_bound"]
    lines.append(
        f"failure probability {summary['failure_probability']:.3g} "
        + ("(declared priors: no learned radius)" if bound["beta_per_round"] is None else
           f"= {bound['groups']} groups x {bound['learning_rounds']} learning rounds x beta "
           f"{bound['beta_per_round']:g}, "
           + ("per privacy window (the rounds in it + 1 carried in + 1 for the learning "
              "clock's offset)"
              if bound["horizon"] == "window" else "until the budget is exhausted")))
    lines.append(f"guarantee: {summary['guarantee']}")
    if learning is not None:
        lines.append("learned priors: theta follows the published rounds (laws and radii); these "
                     "figures are for the starting laws (radius 2 without a declared law); a "
                     "round's radius needs a noisy group mass above "
                     f"{learning['noise_tail_users']:.4g} users")
    return "\n".join(lines)


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
        print(_text(summary))
    return 0 if math.isfinite(summary["charge_per_release"]) else 2
