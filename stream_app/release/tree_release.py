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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pufferfish_core.noise import grid_units
from pufferfish_core.plan import ReleasePlan
from pufferfish_core.schedule import learning_ticks, window_ticks
from pufferfish_core.tree import TreeMechanism, tree_mechanism
from pufferfish_core.tree_plan import release_budget
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
    due in the window (``core.tree_plan.release_budget``, as ``pufferfish plan`` computes it);
    0 when the rounds leave nothing."""
    s = settings
    assert s.budget_window_seconds is not None
    first, last = window_ticks(window, s.release_period_seconds, s.budget_window_seconds)
    rounds = (learning_ticks(max(first, 1), last, s.release_period_seconds,
                             s.learn_period_seconds) if s.prior_source == "learned" else 0)
    return max(release_budget(s.budget_total, rounds, s.epsilon_learn), 0.0)


def partition_units(p: Partial, window: int) -> int | None:
    """A partition's admitted sum for ``window`` when its partial is in the window or just
    after it (its final one); None when it cannot tell (two windows ahead). A partition behind
    the window (``behind``) is never read: the release waits for it."""
    if p.window == window:
        return p.admitted_units
    if p.window == window + 1 and p.previous_units is not None:
        return p.previous_units
    return None


def behind(p: Partial | None, window: int) -> bool:
    """The partition has not shown that it entered ``window`` (no partial, an independent-mode
    one, or one of an earlier window): its admitted sum for the window is not known yet."""
    return p is None or p.window is None or p.admitted_units is None or p.window < window


@dataclass(frozen=True)
class WindowReading:
    """What the partials tell of a window's admitted sum at one tick."""

    waiting_for: tuple[int, ...]  # partitions behind the window: the tick waits for them
    units: int | None  # the sum; None: a partition cannot tell it (the window is frozen)
    snapshot: int  # every partition's current contribution: a frozen window's base if needed


def read_window(partials: Mapping[int, Partial], window: int, partitions: int) -> WindowReading:
    """The window's admitted sum over the input partitions 0..partitions-1 (and any other one
    that published), docs/privacy.md "Continual release", "On the worker"."""
    keys = sorted(set(range(partitions)) | set(partials))
    waiting = tuple(k for k in keys if behind(partials.get(k), window))
    total: int | None = 0
    snapshot = 0
    for k in keys:
        p = partials.get(k)
        if p is None or k in waiting:
            continue
        units = partition_units(p, window)
        snapshot += p.sum_units if units is None else units
        total = None if total is None or units is None else total + units
    return WindowReading(waiting, total, snapshot)


class OpenTree:
    """One tick's use of its window's tree: the charge, the draw and what the record says."""

    def __init__(self, tree: WindowTree, tick: int, first: int, charge: float,
                 partitions: int, priors_seq: int = 0) -> None:
        self.tree = tree
        self.priors_seq = priors_seq  # the round whose laws calibrated the tree's theta
        self.window = tree.window
        self.window_tick = tick - first
        self.charge = charge
        self.partitions = partitions
        self.drawn: TreeDraw | None = None
        self.reading: WindowReading | None = None

    @property
    def mechanism(self) -> TreeMechanism:
        return self.tree.mechanism

    def ready(self, partials: Mapping[int, Partial]) -> bool:
        """Every input partition shows the window (else the tick is tried again: reading a
        partition behind it could show a change counted in the window before)."""
        self.reading = read_window(partials, self.window, self.partitions)
        if self.reading.waiting_for:
            self.tree.note_waiting(self.reading.waiting_for, self.window_tick)
            return False
        return True

    async def draw(self) -> int:
        """The noisy sum in grid units (its nodes journaled first)."""
        assert self.reading is not None and not self.reading.waiting_for
        self.drawn = await self.tree.release(self.window_tick, self.reading.units,
                                             self.reading.snapshot)
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
        self.tree_round = 0  # the learning round whose laws calibrated ``tree``
        self.paid: set[int] = set()  # windows whose tree charge is on the books
        self.published: dict[int, Release] = {}  # each window's last release in the journal

    def restore(self, releases: Sequence[Release], priors: Sequence[PriorsRecord],
                intent: Release | None = None) -> None:
        """After the journals were read: the windows charged (``intent``: the local file's last
        release, whose send may have failed: its window's charge is on this host's books too),
        and the tree read again."""
        self.published = {r.window: r for r in releases
                          if r.mechanism == "tree" and r.window is not None}  # the last one
        self.paid = set(self.published)
        if intent is not None and intent.mechanism == "tree" and intent.window is not None:
            self.paid.add(intent.window)
        self.priors = list(priors)
        self.tree = None
        self.journal.forget()

    def note_round(self, records: Sequence[PriorsRecord]) -> None:
        self.priors.extend(records)

    def opening_plan(self, first: int) -> tuple[ReleasePlan, int]:
        """The plan of the laws in force at tick ``first`` (a round on that tick comes before
        its release), and the round they come from (0: the settings' laws)."""
        laws, radii, round_ = in_force(
            [r for r in self.priors if r.tick is None or r.tick <= first],
            self.initial.laws, self.initial.radii)
        return plan_for(self.settings, laws, radii), round_

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
            plan, round_ = self.opening_plan(first)
            m = tree_mechanism(last - first + 1, s.max_changes_per_window, s.pairs,
                               plan.spread, s.domain, eps, s.grid_log2)
            latest = self.published.get(window)
            units = None if latest is None else grid_units(latest.noisy_sum, s.grid_log2)
            published = (None if latest is None or units is None
                         else (units, tuple(latest.nodes or ())))
            self.tree = WindowTree(m, window, self.journal, published)
            self.tree_round = round_
        charge = 0.0 if window in self.paid else self.tree.mechanism.charge()
        return OpenTree(self.tree, tick, first, charge, s.input_partitions, self.tree_round)

    def charged(self, window: int) -> None:
        """The window's charge is on the books (kept even when the release is not sent)."""
        self.paid.add(window)

    async def close(self) -> None:
        await self.journal.close()
