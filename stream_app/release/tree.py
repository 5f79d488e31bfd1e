"""One privacy window's tree on the release owner: each node's noise drawn once, journaled
before any release uses it, and read back by a restarted or new owner (docs/design.md,
"Continual release: wiring the tree"; the mechanism and its charge: core/tree.py).

The release at tick t is the exact sum S_t (in grid units) plus the noise of the base and of
t's prefix nodes; by telescoping that is the tree mechanism's base + nodes. A draw is kept only
once the journal has it: a draw whose append failed was never published and is forgotten, and
the next release re-reads the journal first (the append may have landed after all), so that the
first journaled draw of a node is the only one ever used. The journal holds the raw noise,
which with a published value gives the exact sum: it is operator-facing only, like the partials.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pufferfish_core.errors import PufferfishError
from pufferfish_core.tree import TreeMechanism


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
    """The tree of ``window`` for ``mechanism``, continued from ``journal``."""

    def __init__(self, mechanism: TreeMechanism, window: int, journal: NodeJournal) -> None:
        self.mechanism = mechanism
        self.window = window
        self.journal = journal
        self.drawn: dict[str, int] = {}
        self.synced = False

    async def restore(self) -> None:
        """Adopt the journal's draws of this window (the first one of each node wins)."""
        drawn: dict[str, int] = {}
        for draw in await self.journal.read(self.window):
            self._check(draw)
            drawn.setdefault(draw.node, draw.units)
        self.drawn, self.synced = drawn, True

    def _check(self, draw: NodeDraw) -> None:
        m = self.mechanism
        if (draw.scale, draw.arity, draw.ticks) != (m.scale, m.shape.arity, m.shape.ticks):
            raise TreeMismatch(
                f"window {self.window}: the journal's tree (scale {draw.scale}, arity "
                f"{draw.arity}, ticks {draw.ticks}) is not this one (scale {m.scale}, arity "
                f"{m.shape.arity}, ticks {m.shape.ticks}); a window's tree is fixed when it opens")

    async def release(self, tick: int, exact_units: int) -> TreeDraw:
        """S_tick + the noise of the base and tick's prefix nodes, drawing the missing ones."""
        if not self.synced:
            await self.restore()
        m = self.mechanism
        nodes = m.draws(tick)
        fresh = [NodeDraw(self.window, node, m.draw_units(), m.scale, m.shape.arity,
                          m.shape.ticks) for node in nodes if node not in self.drawn]
        if fresh:
            try:
                await self.journal.append(fresh)
            except BaseException:
                self.synced = False  # it may have landed: re-read before the next release
                raise
            self.drawn.update((d.node, d.units) for d in fresh)
        noise = sum(self.drawn[node] for node in nodes)
        return TreeDraw(tick, exact_units + noise, tuple(nodes))
