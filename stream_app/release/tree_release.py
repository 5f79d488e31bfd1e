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
from collections.abc import Iterable, Sequence
from fractions import Fraction

from pufferfish_core.budget import exact_decimal
from pufferfish_core.plan import ReleasePlan
from pufferfish_core.schedule import learning_ticks, window_ticks
from pufferfish_core.tree import TreeMechanism, tree_mechanism
from stream_app.domain.models import Partial, PriorsRecord, Release
from stream_app.domain.priors import PublicPriors, plan_for
from stream_app.metrics import Metrics
from stream_app.release.publisher import Publisher
from stream_app.release.restore import in_force
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


class OpenTree:
    """One tick's use of its window's tree: the charge, the draw and what the record says."""

    def __init__(self, tree: WindowTree, tick: int, first: int, charge: float) -> None:
        self.tree = tree
        self.window = tree.window
        self.window_tick = tick - first
        self.charge = charge
        self.drawn: TreeDraw | None = None

    @property
    def mechanism(self) -> TreeMechanism:
        return self.tree.mechanism

    async def draw(self, partials: Iterable[Partial]) -> int | None:
        """The noisy sum in grid units (its nodes journaled first); None when a partition
        cannot tell the window's sum (nothing drawn)."""
        total = window_units(list(partials), self.window)
        if total is None:
            log.warning("window %d: a partition is two windows ahead or lost the window's "
                        "final sum; tick %d skipped", self.window, self.window_tick)
            return None
        self.drawn = await self.tree.release(self.window_tick, total)
        return self.drawn.noisy_units


class TreeReleases:
    """The window's tree on the release owner, continued from the node journal."""

    def __init__(self, settings: Settings, metrics: Metrics, publisher: Publisher,
                 initial: PublicPriors) -> None:
        self.settings = settings
        self.journal = KafkaNodeJournal(settings, metrics, publisher)
        self.initial = initial
        self.priors: list[PriorsRecord] = []  # every published round (the opening laws)
        self.tree: WindowTree | None = None
        self.paid: set[int] = set()  # windows whose tree charge is on the books

    def restore(self, releases: Sequence[Release], priors: Sequence[PriorsRecord]) -> None:
        """After the journals were read: the windows charged, and the tree read again."""
        self.paid = {r.window for r in releases if r.mechanism == "tree" and r.window is not None}
        self.priors = list(priors)
        self.tree = None
        self.journal.forget()

    def note_round(self, records: Sequence[PriorsRecord]) -> None:
        self.priors.extend(records)

    def opening_plan(self, first: int) -> ReleasePlan:
        """The plan of the laws in force at tick ``first`` (a round on that tick comes before
        its release)."""
        laws, radii, _ = in_force([r for r in self.priors if r.tick is None or r.tick <= first],
                                  self.initial.laws, self.initial.radii)
        return plan_for(self.settings, laws, radii)

    def open(self, tick: int, window: int | None) -> OpenTree | None:
        """The tick's window tree (built when the window opens); None: no budget for it."""
        s = self.settings
        assert s.budget_window_seconds is not None and window is not None
        first, last = window_ticks(window, s.release_period_seconds, s.budget_window_seconds)
        if self.tree is None or self.tree.window != window:
            eps = tree_epsilon(s, window)
            if eps <= 0:
                log.warning("window %d: no budget left for a tree after its learning rounds",
                            window)
                return None
            m = tree_mechanism(last - first + 1, s.max_changes_per_window, s.pairs,
                               self.opening_plan(first).spread, s.domain, eps, s.grid_log2)
            self.tree = WindowTree(m, window, self.journal)
        charge = 0.0 if window in self.paid else self.tree.mechanism.charge()
        return OpenTree(self.tree, tick, first, charge)

    def charged(self, window: int) -> None:
        """The window's charge is on the books (kept even when the release is not sent)."""
        self.paid.add(window)

    async def close(self) -> None:
        await self.journal.close()
