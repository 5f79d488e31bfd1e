"""`pufferfish demo`: the whole pipeline on one machine, with nothing to set up.

Starts an embedded broker (tansu, in memory), a worker subprocess, and a producer that replays
the UCI adult `education-num` column (values 1..16) as the reports of a rolling population of
users who join, report, leave and rejoin. The worker learns the population's law with DP
learning rounds; every release and learning round is printed on one line, and the worker's
/metrics is served on 127.0.0.1. Each release is shown next to the exact sum it was drawn
from, its error, θ and the noise sd (stream_app.demo.demo_view; the exact sum is known only
because the demo simulates the users, and is never published). The run ends by itself: with
the tree mechanism (the default) at the end of a privacy window (stream_app.demo.demo_defaults),
with independent releases once the budget is spent (the worker's ``pufferfish_budget_exhausted``,
after the last release is shown); or after --duration; Ctrl-C or SIGTERM stop it earlier.
Every way, everything stops cleanly (exit 0) and a PNG of noisy vs exact sums and of the budget
spent is written, its path printed (stream_app.demo.demo_plot).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pufferfish_core.errors import PufferfishInputError
from stream_app.demo import demo_defaults
from stream_app.demo.broker import port_free
from stream_app.demo.demo_run import PROG, DemoRun
from stream_app.settings import arguments

DESCRIPTION = ("The whole pipeline on one machine, with nothing to set up: an embedded broker, "
               "one worker and a simulated population. Each release is printed next to the "
               "exact sum it was drawn from; the run ends by itself (tree: at the end of a "
               "privacy window; independent: when the budget is spent), after --duration or "
               "at Ctrl-C, and writes a PNG of noisy vs exact sums.")

# The options whose number must be finite and > 0 (_check, once the mechanism's defaults fill
# those left unset: stream_app.demo.demo_defaults): flag, type, default, metavar, help.
POSITIVE_OPTIONS: tuple[tuple[str, type, float | None, str, str], ...] = (
    ("--users", int, 200, "N", "size of the user population"),
    ("--rate", float, 200.0, "N", "events per second sent (all kinds)"),
    ("--duration", float, None, "S", "seconds to run at most (default: tree, until the end of "
     "a window; independent, until the budget is spent)"),
    ("--epsilon", float, 1.0, "E", "privacy loss per release (independent)"),
    ("--budget", float, None, "E", "privacy loss of the run (releases and learning rounds), "
     "per window with one (default: tree 10, independent 50)"),
    ("--release-period", float, None, "S",
     "seconds between releases (default: tree 1, independent 5)"),
    ("--learn-period", float, None, "S", "seconds between learning rounds (DP estimate of the "
     "group's law; default: tree 30, independent 10)"),
    ("--epsilon-learn", float, None, "E",
     "privacy loss per learning round (default: tree 0.5, independent 1)"),
)


def _parser() -> argparse.ArgumentParser:
    p = arguments.CommandParser(f"{PROG} demo", DESCRIPTION)
    for flag, kind, default, metavar, text in POSITIVE_OPTIONS:
        p.add_argument(flag, type=kind, default=default, metavar=metavar, help=text)
    p.add_argument("--metrics-port", type=int, default=9102, metavar="PORT",
                   help="worker /metrics port on 127.0.0.1 (0: one the OS picks)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of the population's join/leave churn")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE",
                   help="PNG written at the end: noisy vs exact sum, budget spent "
                   "(default: a new pufferfish-demo-*.png in the temporary directory)")
    p.add_argument("--no-plot", action="store_true", help="write no PNG")
    p.add_argument("--quiet", action="store_true",
                   help="terse release lines (theta, noisy sum) without exact sum and error")
    demo_defaults.add_arguments(p)
    return p


def _check(args: argparse.Namespace) -> None:
    if args.max_changes < 0:
        raise PufferfishInputError("max-changes", f"must be >= 0, got {args.max_changes}")
    # --window is the mechanism's option (stream_app.demo.demo_defaults), > 0 as well
    for flag in [*(option[0] for option in POSITIVE_OPTIONS), "--window"]:
        name = flag.removeprefix("--")
        value = getattr(args, name.replace("-", "_"))
        if value is not None and not 0 < value < math.inf:  # None: no duration, no window
            raise PufferfishInputError(name, f"must be a finite number > 0, got {value}")
    if args.plot is not None and args.no_plot:
        raise PufferfishInputError("plot", "--plot and --no-plot exclude each other")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise PufferfishInputError("plot", f"must name a .png file, got {args.plot}")
    if not 0 <= args.metrics_port <= 65535:
        raise PufferfishInputError("metrics-port", f"must be in 0..65535, got {args.metrics_port}")
    if args.metrics_port and not port_free(args.metrics_port):
        raise PufferfishInputError(
            "metrics-port", f"127.0.0.1:{args.metrics_port} is in use (0 picks a free port)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
        demo_defaults.fill(args, time.time())
        _check(args)
    except PufferfishInputError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(DemoRun(args).run())
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers were installed
        return 0
