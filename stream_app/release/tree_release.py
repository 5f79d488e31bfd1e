"""The releaser's tree mode (``release_mechanism=tree``): per privacy window, one tree over the
window's ticks, fixed when the window opens, charged once (docs/design.md, "Continual release:
wiring the tree"; the proof: docs/privacy.md, "Continual release: the tree mechanism").

The tree of window j is ``core.tree.tree_mechanism`` over its T_j ticks (core.schedule
.window_ticks) at the spread of the laws in force at its first tick (a round learned later in
the window calibrates the next one), with the window's budget minus the learning rounds due in
it (``tree_epsilon``): the window's charge, spent on its first release (later ones charge 0).
Every field a release gains is a function of the settings, the clock and the published laws.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from core.budget import exact_decimal
from core.plan import ReleasePlan
from core.schedule import learning_ticks, window_ticks
from core.tree import TreeMechanism, tree_mechanism
from stream_app.domain.models import Partial, Release
from stream_app.metrics import Metrics
from stream_app.release.publisher import Publisher
from stream_app.release.tree import TreeDraw, WindowTree
from stream_app.release.tree_nodes import KafkaNodeJournal
from stream_app.settings import Settings

log = logging.getLogger(__name__)


def tree_epsilon(settings: Settings, window: int) -> float:
    """The window's budget for its tree: budget_total minus epsilon_learn per learning round
    due in the window, rounded down to a float whose decimal the accountant adds exactly."""
    s = settings
    assert s.budget_window_seconds is not None
    first, last = window_ticks(window, s.release_period_seconds, s.budget_window_seconds)
    rounds = (learning_ticks(max(first, 1), last, s.release_period_seconds,
                             s.learn_period_seconds) if s.prior_source == "learned" else 0)
    left = exact_decimal(s.budget_total) - rounds * exact_decimal(s.epsilon_learn)
    eps = float(left)
    while eps > 0 and exact_decimal(eps) > left:
        eps = math.nextafter(eps, 0.0)
    return eps if left > Fraction(0) else 0.0


def window_units(partials: Sequence[Partial], window: int) -> int | None:
    """The sum of admitted contributions in ``window`` over the partitions; None when a partition
    cannot tell it (it entered a later window and does not know the final one of ``window``)."""
    total = 0
    for p in partials:
        if p.window is None or p.window < window or p.admitted_units is None:
            total += p.sum_units  # behind: no record in the window yet, its base is the raw sum
        elif p.window == window:
            total += p.admitted_units
        elif p.window == window + 1 and p.previous_units is not None:
            total += p.previous_units  # ahead: the window's final admitted sum
        else:
            return None
    return total


@dataclass(frozen=True)
class TreeFacts:
    """What a tree release publishes besides the sum (all public)."""

    window_tick: int
    nodes: tuple[str, ...]
    arity: int
    scale: float
    charge: float


class TreeReleases:
    """The window's tree on the release owner, continued from the node journal."""

    def __init__(self, settings: Settings, metrics: Metrics, publisher: Publisher,
                 opening_plan: Callable[[int], ReleasePlan]) -> None:
        """``opening_plan(first_tick)``: the plan of the laws in force at that tick."""
        self.settings = settings
        self.journal = KafkaNodeJournal(settings, metrics, publisher)
        self.opening_plan = opening_plan
        self.tree: WindowTree | None = None
        self.charged: set[int] = set()  # windows whose tree charge is on the books

    def restore(self, releases: Sequence[Release]) -> None:
        """After the journals were read: the windows charged, and the tree read again."""
        self.charged = {r.window for r in releases
                        if r.mechanism == "tree" and r.window is not None}
        self.tree = None
        self.journal.forget()

    def mechanism(self, window: int) -> tuple[TreeMechanism, int] | None:
        """The window's tree and its first tick; None when the window has no budget for it."""
        s = self.settings
        assert s.budget_window_seconds is not None
        first, last = window_ticks(window, s.release_period_seconds, s.budget_window_seconds)
        if self.tree is not None and self.tree.window == window:
            return self.tree.mechanism, first
        eps = tree_epsilon(s, window)
        if eps <= 0:
            log.warning("window %d: no budget left for the tree after its learning rounds", window)
            return None
        plan = self.opening_plan(first)
        m = tree_mechanism(last - first + 1, s.max_changes_per_window, s.pairs, plan.spread,
                           s.domain, eps, s.grid_log2)
        self.tree = WindowTree(m, window, self.journal)
        return m, first

    def charge(self, window: int) -> float:
        """The window's charge on its first release, 0 after."""
        if window in self.charged or self.tree is None:
            return 0.0
        return self.tree.mechanism.charge()

    def charged_now(self, window: int) -> None:
        """The charge is on the books (kept even when the release is not sent)."""
        self.charged.add(window)

    async def draw(self, tick: int, first: int, total_units: int) -> TreeDraw:
        assert self.tree is not None
        return await self.tree.release(tick - first, total_units)

    async def close(self) -> None:
        await self.journal.close()
