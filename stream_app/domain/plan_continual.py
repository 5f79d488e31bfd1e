"""``pufferfish plan``'s figures for both release mechanisms at the configured budget.

With a privacy window the releases of a window get epsilon_r = budget_total minus the most
learning charges of any window (core.tree_plan.release_budget); ``tree`` spends it on one tree
over the window's ticks, ``independent`` on T releases of epsilon_r / T each (both from
core.tree_plan.compare_mechanisms, for a window of the most ticks). The configured mechanism's
figure is ``noise_sd``; the configured ``independent`` mechanism releases at ``epsilon`` (its
``noise_sd`` is the release plan's), which spends at most the same budget. The loss per day is
budget_total times the most epoch-aligned windows a UTC day meets (core.tree_plan.windows_per_day),
with the failure probability of that many windows (stream_app.domain.planning module docstring).
"""

from __future__ import annotations

from typing import Any

from pufferfish_core.errors import PufferfishInputError
from pufferfish_core.plan import ReleasePlan, radius_failure_bound
from pufferfish_core.schedule import WindowSchedule, window_pattern
from pufferfish_core.tree import tree_mechanism
from pufferfish_core.tree_plan import compare_mechanisms, release_budget, windows_per_day
from stream_app.settings import Settings


def tree_mode(s: Settings) -> bool:
    return s.release_mechanism == "tree"


def tree_window(s: Settings, learned: bool) -> WindowSchedule:
    """The windows in tree mode: every tick releases, every due learning round is charged."""
    assert s.budget_window_seconds is not None  # the settings require a window with tree
    return window_pattern(s.release_period_seconds, s.budget_window_seconds,
                          s.learn_period_seconds if learned else None)


def mechanisms(s: Settings, plan: ReleasePlan, windows: WindowSchedule | None,
               learned: bool) -> dict[str, Any]:
    """The JSON fields both mechanisms add (module docstring)."""
    out: dict[str, Any] = {
        "release_mechanism": s.release_mechanism,
        "max_changes_per_window": s.max_changes_per_window,
        "noise_sd": plan.noise_sd(),
        "noise_sd_independent": plan.noise_sd(),
        "noise_sd_tree": None,
        "arity": None,
        "window_charge": None,
        "continual": None,
    }
    if windows is None:  # independent releases, one budget for the deployment's life
        return out
    rounds = windows.rounds_max if learned else 0
    learn = s.epsilon_learn if learned else None
    epsilon_r = release_budget(s.budget_total, rounds, learn)
    if epsilon_r <= 0:
        if tree_mode(s):
            raise PufferfishInputError(
                "budget_total", f"must exceed the learning charges of a window ({rounds} "
                f"rounds x epsilon_learn {s.epsilon_learn:g}): the tree has no budget left")
        return out
    both = compare_mechanisms(tree_mechanism(windows.ticks_max, s.max_changes_per_window,
                                             s.pairs, plan.spread, s.domain, epsilon_r,
                                             s.grid_log2))
    tree = both.tree
    out.update({
        "noise_sd_independent": both.noise_sd_independent,
        "noise_sd_tree": both.noise_sd_tree,
        "arity": tree.shape.arity,
        "continual": {
            "ticks": both.ticks,
            "release_budget": epsilon_r,
            "learning_rounds": rounds,
            "epsilon_learn": learn,
            "sensitivity": tree.sensitivity,
            "node_theta": tree.scale,
            "independent_theta": both.ticks * plan.spread / epsilon_r,
            "window_shapes": window_shapes(s, plan, windows, epsilon_r),
        },
    })
    if tree_mode(s):
        out.update(noise_sd=both.noise_sd_tree, window_charge=tree.charge())
    else:
        out["window_charge"] = windows.releases_max * plan.charge()
    return out


def window_shapes(s: Settings, plan: ReleasePlan, windows: WindowSchedule,
                  epsilon_r: float) -> list[dict[str, Any]]:
    """The tree of every window length the settings give (a window that is not a whole number
    of periods alternates two lengths, e.g. 1.5 periods: 2 and 1 ticks), each with its own
    sensitivity, arity and node theta, as the worker builds it when the window opens
    (stream_app/release/tree_release.py; the windows' learning rounds may leave it more than
    epsilon_r, never less)."""
    out = []
    for ticks in sorted({windows.ticks_min, windows.ticks_max}):
        tree = tree_mechanism(ticks, s.max_changes_per_window, s.pairs, plan.spread, s.domain,
                              epsilon_r, s.grid_log2)
        out.append({"ticks": ticks, "sensitivity": tree.sensitivity,
                    "arity": tree.shape.arity, "node_theta": tree.scale,
                    "noise_sd": tree.noise_sd()})
    return out


def loss_per_day(s: Settings, failure: dict[str, Any]) -> dict[str, Any]:
    """The loss over one UTC day and its failure probability (module docstring)."""
    bound = failure["failure_bound"]
    beta = bound["beta_per_round"]
    if s.budget_window_seconds is None:  # one budget over the whole life, so over any day
        return {"windows": None, "loss": s.budget_total,
                "failure_probability": failure["failure_probability"]}
    k = windows_per_day(s.budget_window_seconds)
    rounds = k * bound["learning_rounds_in_horizon"] + bound["carried_in_rounds"]
    p = 0.0 if beta is None else radius_failure_bound(bound["groups"], rounds, beta)
    return {"windows": k, "loss": k * s.budget_total, "failure_probability": p,
            "learning_rounds": rounds}
