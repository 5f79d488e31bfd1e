"""The demo's release mechanism and the defaults that go with it.

``tree`` (the default): one tree per privacy window of ``--window`` seconds (docs/privacy.md,
"Continual release: the tree mechanism"), a release every second, a learning round every 30 s
of epsilon_learn 0.5, a budget of 10 per window (4 rounds take 2, the tree gets 8), each user's
contribution changing at most ``--max-changes`` times per window; the run ends by itself at the
end of the first window at least half a window after the start (the budget renews every
window, so it is never spent for good). ``independent``: the earlier defaults, one budget for the
whole run (it ends when the budget is spent). A flag given on the command line always wins.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from pufferfish_core.errors import PufferfishInputError

# --by-group: the groups, user i joins BY_GROUP[i % 2]
BY_GROUP = ("even", "odd")

DEFAULTS: dict[str, dict[str, Any]] = {
    "tree": {"release_period": 1.0, "learn_period": 30.0, "epsilon_learn": 0.5, "budget": 10.0,
             "window": 120.0},
    "independent": {"release_period": 5.0, "learn_period": 10.0, "epsilon_learn": 1.0,
                    "budget": 50.0, "window": None},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mechanism", choices=sorted(DEFAULTS), default="tree",
                   help="release mechanism (default tree; the defaults of the periods, "
                   "epsilon-learn and budget follow it: module stream_app.demo.demo_defaults)")
    p.add_argument("--window", type=float, default=None, metavar="S",
                   help="privacy window in seconds; the budget is per window (default: tree 120, "
                   "independent none)")
    p.add_argument("--max-changes", type=int, default=4, metavar="N",
                   help="tree: times a user's contribution may change per window (default 4)")
    p.add_argument("--by-group", action="store_true",
                   help="release_by_group with two groups (users alternate between "
                   f"{' and '.join(BY_GROUP)}): each release also carries every group's noisy "
                   "sum and count; the plot shows each group's band (needs --mechanism "
                   "independent)")


def fill(args: argparse.Namespace, now: float) -> None:
    """The mechanism's defaults for what the command line left unset; in tree mode without
    --duration, the run lasts until the end of a window (module docstring)."""
    if args.by_group and args.mechanism == "tree":
        raise PufferfishInputError("by-group", "needs --mechanism independent (per-group "
                                   "releases are not available with the tree)")
    for name, value in DEFAULTS[args.mechanism].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.mechanism == "tree" and args.duration is None and args.window:
        args.duration = until_window_end(now, args.window)


def until_window_end(now: float, window: float) -> float:
    """Seconds from ``now`` to the end of the first epoch-aligned window that ends at least
    half a window later."""
    return math.ceil((now + window / 2) / window) * window - now
