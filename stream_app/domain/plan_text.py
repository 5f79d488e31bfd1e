"""The text form of ``pufferfish plan`` (stream_app.domain.planning builds the summary)."""

from __future__ import annotations

from typing import Any

from stream_app.domain.plan_groups import by_group_lines


def plan_text(summary: dict[str, Any]) -> str:
    lines = [f"{'group':<16} {'radius':>7} {'pair':<24} {'theta':>10} {'plain theta':>12}"]
    for group, row in summary["groups"].items():
        for pair, theta in row.items():
            plain = summary["groups_plain"][group][pair]
            lines.append(f"{group:<16} {summary['radii'][group]:>7.4g} {pair:<24} "
                         f"{theta:>10.6g} {plain:>12.6g}")
    lines += [
        "",
        f"theta {summary['theta']:.6g} (plain, radius 0: {summary['theta_plain']:.6g}; "
        f"binding: group {summary['binding_group']}, "
        f"pair {summary['binding_pair']}; rule {summary['rule']}, epsilon {summary['epsilon']:g}"
        f"{_theta_note(summary)})",
        *_mechanism_lines(summary),
        *by_group_lines(summary.get("by_group")),
        _budget_line(summary),
        *_window_lines(summary["window"]),
        _failure_line(summary),
        f"guarantee: {summary['guarantee']}",
        _day_line(summary),
    ]
    learning = summary["learning"]
    if learning is not None:
        lines.append("learned priors: theta follows the published rounds (laws and radii); these "
                     "figures are for the starting laws (radius 2 without a declared law); a "
                     "round's radius needs a noisy group mass above "
                     f"{learning['noise_tail_users']:.4g} users")
    return "\n".join(lines)


def _budget_line(summary: dict[str, Any]) -> str:
    learning = summary["learning"]
    line = (f"budget {summary['budget_total']:g}: {summary['releases_until_exhausted']} releases, "
            f"{summary['seconds_until_exhausted']:g} s at one per "
            f"{summary['release_period_seconds']:g} s")
    if learning is None:
        return line
    line += (f", with {learning['rounds_until_exhausted']} learning rounds of epsilon_learn "
             f"{learning['epsilon_learn']:g} every {learning['learn_period_seconds']:g} s")
    window = summary["window"]
    if window is not None:
        return line + (" (the most rounds and the fewest releases of any window)"
                       if window["exact"] else
                       " (bounds: at least these releases, at most these rounds)")
    worst = (learning["releases_until_exhausted_min"], learning["rounds_until_exhausted_max"])
    if worst == (summary["releases_until_exhausted"], learning["rounds_until_exhausted"]):
        return line + " (from any start time)"
    return line + (f" (from a first tick just after a learning tick; from another first tick: "
                   f"at least {worst[0]} releases, at most {worst[1]} learning rounds)")


def _span(low: int, high: int) -> str:
    return f"{low}" if low == high else f"{low} to {high}"


def _window_lines(window: dict[str, Any] | None) -> list[str]:
    if window is None:
        return []
    size = window["seconds"]
    alike = window["exact"] and window["releases_per_window"] == window["releases_per_window_max"]
    if window["distinct_windows"] is None:
        how = ("bounds over every phase: the tick and learning pattern repeats only after more "
               "than 10000 windows")
    else:
        count = window["distinct_windows"]
        how = ("every window alike" if count == 1 else
               f"exact for every window: the pattern repeats every {count} windows")
    lines = [
        f"privacy window {size:g} s (budget_total per window; window j covers "
        f"[j x {size:g}, (j+1) x {size:g}) s since the epoch): "
        f"{_span(window['releases_per_window'], window['releases_per_window_max'])} of "
        f"{_span(window['ticks_per_window'], window['ticks_per_window_max'])} ticks release, "
        f"the budget lasts {'' if alike else 'at least '}{window['budget_lasts_seconds']:g} s "
        f"of each window ({how})"]
    if window["runs_out_before_window_end"]:
        lines.append("warning: the budget runs out before the window ends: no release "
                     "for the rest of each window (raise budget_total, lower epsilon, "
                     "or shorten the window)")
    return lines


def _failure_line(summary: dict[str, Any]) -> str:
    bound = summary["failure_bound"]
    head = f"failure probability {summary['failure_probability']:.3g} "
    if bound["beta_per_round"] is None:
        return head + "(declared priors: no learned radius)"
    where = ("per privacy window (the most rounds of any window + 1 carried in)"
             if bound["horizon"] == "window" else
             "until the budget is exhausted (the most rounds of any start time)")
    return head + (f"= {bound['groups']} groups x {bound['learning_rounds']} learning rounds x "
                   f"beta {bound['beta_per_round']:g}, {where}")


def _mechanism_lines(summary: dict[str, Any]) -> list[str]:
    """The configured mechanism's noise and charge, then both mechanisms at the same budget."""
    w = summary["max_changes_per_window"]
    both = summary["continual"]
    if summary["release_mechanism"] == "tree":
        lines = [
            f"noise standard deviation {summary['noise_sd']:.6g} per release (release mechanism "
            f"tree, arity {summary['arity']}, node theta {both['node_theta']:.6g}, "
            f"sensitivity {both['sensitivity']:g})",
            f"charge per window {summary['window_charge']:.6g} (the tree's, at the window's "
            "first release; 0 at the others)",
            f"contribution bound: max_changes_per_window {w}: each user's contribution to the "
            f"sum changes at most {w} times per window; later changes wait for the next window",
        ]
        shapes = both["window_shapes"]
        if len(shapes) > 1:
            lines.append("windows of two lengths (budget_window_seconds is not a whole number "
                         "of periods): " + "; ".join(
                             f"{x['ticks']} ticks: sensitivity {x['sensitivity']:g}, arity "
                             f"{x['arity']}, node theta {x['node_theta']:.6g}, noise sd "
                             f"{x['noise_sd']:.6g}" for x in shapes))
    else:
        lines = [
            f"noise standard deviation {summary['noise_sd']:.6g} per release (release "
            "mechanism independent)",
            f"charge per release {summary['charge_per_release']:.6g} (epsilon "
            f"{summary['epsilon']:g}; more when spread/theta is larger: docs/privacy.md)",
        ]
    if both is None:
        return lines
    rounds = ("" if not both["learning_rounds"] else
              f" - {both['learning_rounds']} learning rounds x {both['epsilon_learn']:g}")
    lines.append(
        f"both mechanisms at the window's release budget {both['release_budget']:.6g} = "
        f"budget_total {summary['budget_total']:g}{rounds}, over {both['ticks']} ticks: "
        f"noise sd {summary['noise_sd_tree']:.6g} tree (max_changes_per_window {w}), "
        f"{summary['noise_sd_independent']:.6g} independent ({both['ticks']} releases of "
        f"epsilon {both['release_budget'] / both['ticks']:.3g}), "
        f"{summary['noise_sd_independent'] / summary['noise_sd_tree']:.3g}x")
    return lines


def _day_line(summary: dict[str, Any]) -> str:
    day = summary["loss_per_day"]
    p = day["failure_probability"]
    bound = summary["failure_bound"]
    if bound["beta_per_round"] is None:
        tail = " (declared priors: no failure probability)"
    elif day["windows"] is None:
        tail = f", except with probability <= {p:.3g}"
    else:
        tail = (f", except with probability <= {p:.3g} = {bound['groups']} groups x "
                f"{day['learning_rounds']} learning rounds x beta {bound['beta_per_round']:g}")
    if day["windows"] is None:
        return (f"loss per day: at most {day['loss']:g} (budget_total: one budget for the "
                f"deployment's life){tail}")
    windows = "1 window" if day["windows"] == 1 else f"{day['windows']} windows"
    return (f"loss per day: at most {day['loss']:.6g} = {windows} x budget_total "
            f"{summary['budget_total']:g} (the most privacy windows a UTC day meets){tail}")


def _theta_note(summary: dict[str, Any]) -> str:
    if summary["release_mechanism"] != "tree":
        return ""
    return "; independent releases' theta: the tree's node theta is below"
