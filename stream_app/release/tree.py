"""One privacy window's tree on the release owner: each node's noise drawn once, journaled
before any release uses it, and read back by a restarted or new owner (docs/design.md,
"Continual release: wiring the tree"; the mechanism and its charge: core/tree.py).

The release at tick t is the exact sum S_t (in grid units) plus the noise of the base and of
t's prefix nodes; by telescoping that is the tree mechanism's base + nodes. A draw is used only
once the journal has it: a draw whose append failed was never published; the next release
re-reads the journal first (the append may have landed after all) and otherwise appends the
same value again, so that a late landing never puts a second value of a node in the journal;
a draw this tree journaled is never replaced by a read (docs/privacy.md, "On the worker"). On a
broker with transactions the append is part of the release's transaction (publisher.py):
acknowledged before the release is sent, and read back by the next owner even if the
transaction was aborted (journal.py), so a draw a release may have used is never replaced
(docs/privacy.md, "Two concurrent release owners"). The journal holds the raw noise, which
with a published value gives the exact sum: it is operator-facing only, like the partials.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pufferfish_core.errors import PufferfishError
from pufferfish_core.tree import TreeMechanism

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeDraw:
    """One node's noise in one window, with the tree it belongs to."""

    window: int
    node: str
    units: int  # noise in grid units: secret (operator-facing only)
    scale: float  # theta of the window's tree
    arity: int
    ticks: int


class NodeJournal(Protocol):
    async def read(self, window: int) -> Sequence[NodeDraw]:
        """Every draw appended for ``window``, in append order."""

    async def append(self, draws: Sequence[NodeDraw]) -> None:
        """Store ``draws`` durably before returning; raise when that is not certain."""


class TreeMismatch(PufferfishError):
    """The journal holds draws of another tree for this window (scale, arity or ticks)."""


@dataclass(frozen=True)
class TreeDraw:
    """What one release publishes besides the settings: its tick, noisy sum and nodes."""

    tick: int
    noisy_units: int
    nodes: tuple[str, ...]


class WindowTree:
    """The tree of ``window`` for ``mechanism``, continued from ``journal``; ``published``: the
    noisy sum (grid units) and nodes of the window's last release in the releases journal.

    A window is *frozen* once a release of it found a partition that cannot tell its admitted
    sum (two windows ahead of a late tick): from then on every release of the window shows
    the exact sum of its last release again (that of the journal for a new owner), or, when
    the window has none, the partitions' current contributions, which become its base. No
    user's contribution moves in a frozen window, so the tick is published rather than
    skipped (docs/privacy.md, "Continual release", "On the worker")."""

    def __init__(self, mechanism: TreeMechanism, window: int, journal: NodeJournal,
                 published: tuple[int, Sequence[str]] | None = None) -> None:
        self.mechanism = mechanism
        self.window = window
        self.journal = journal
        self.published = published
        self.drawn: dict[str, int] = {}
        self.unsure: dict[str, NodeDraw] = {}  # draws whose append failed (never published)
        self.synced = False
        self.last_exact: int | None = None  # the exact sum of the window's last release
        self.frozen = False
        self.waiting_said: tuple[int, ...] = ()

    def note_waiting(self, partitions: tuple[int, ...], window_tick: int) -> None:
        if partitions != self.waiting_said:
            log.info("window %d tick %d waits for partitions %s to enter the window",
                     self.window, window_tick, list(partitions))
            self.waiting_said = partitions

    async def restore(self) -> None:
        """Adopt the journal's draws of this window (the first one of each node wins), never
        over a draw this tree holds already: those were acknowledged and may have been
        published, and a read can miss them (a broker whose log end stops short, an append
        that lands after the read)."""
        drawn: dict[str, int] = {}
        for draw in await self.journal.read(self.window):
            self._check(draw)
            drawn.setdefault(draw.node, draw.units)
        for node, units in self.drawn.items():
            if drawn.get(node, units) != units:
                log.warning("window %d: the node journal holds another draw of node %s than "
                            "the one this worker journaled (two release owners?); its own is "
                            "kept", self.window, node)
            drawn[node] = units
        self.drawn, self.synced = drawn, True
        if self.last_exact is None and self.published is not None:
            noisy, nodes = self.published  # journaled before it was sent: all drawn
            if all(node in drawn for node in nodes):
                self.last_exact = noisy - sum(drawn[node] for node in nodes)

    def _check(self, draw: NodeDraw) -> None:
        m = self.mechanism
        if (draw.scale, draw.arity, draw.ticks) != (m.scale, m.shape.arity, m.shape.ticks):
            raise TreeMismatch(
                f"window {self.window}: the journal's tree (scale {draw.scale}, arity "
                f"{draw.arity}, ticks {draw.ticks}) is not this one (scale {m.scale}, arity "
                f"{m.shape.arity}, ticks {m.shape.ticks}); a window's tree is fixed when it opens")

    async def release(self, tick: int, exact_units: int | None,
                      snapshot: int | None = None) -> TreeDraw:
        """S_tick + the noise of the base and tick's prefix nodes, drawing the missing ones;
        ``exact_units`` None: the window is frozen from now on (``snapshot``: its base if it
        has no release yet)."""
        if not self.synced:
            await self.restore()
        if exact_units is None and not self.frozen:
            log.warning("window %d frozen at tick %d: a partition cannot tell its admitted sum "
                        "(two windows ahead); its later releases repeat the last exact sum",
                        self.window, tick)
            self.frozen = True
        if self.frozen:
            exact_units = self.last_exact if self.last_exact is not None else snapshot
        if exact_units is None:
            raise ValueError("a frozen window without a release needs a snapshot")
        m = self.mechanism
        nodes = m.draws(tick)
        fresh = [self.unsure.pop(node) if node in self.unsure else NodeDraw(
            self.window, node, m.draw_units(), m.scale, m.shape.arity, m.shape.ticks)
            for node in nodes if node not in self.drawn]
        if fresh:
            try:
                await self.journal.append(fresh)
            except BaseException:
                # it may have landed, or land later: re-read before the next release, and
                # append these same values again if the read does not show them, so that
                # every record of a node in the journal carries one value
                self.unsure.update((d.node, d) for d in fresh)
                self.synced = False
                raise
            self.drawn.update((d.node, d.units) for d in fresh)
        noise = sum(self.drawn[node] for node in nodes)
        self.last_exact = exact_units
        return TreeDraw(tick, exact_units + noise, tuple(nodes))
