"""The node journal in Kafka (``topic_tree_nodes``, 1 partition, never compacted, never public:
it holds raw noise): ``NodeJournal`` (stream_app/release/tree.py) for a release owner that can
move. A new owner after a takeover or SIGKILL reads the window's draws from it and continues
the same tree; a draw is appended with acks=all before any release that uses it is sent
(docs/design.md, "Continual release: wiring the tree"), in that release's transaction on a
broker with transactions. The topic is read whole, aborted transactions included
(journal.py): a draw that reached the log is adopted, never drawn again. The first record of a
node wins (``WindowTree.restore``): without transactions, a second owner in a split brain that
drew the same node again is outvoted by the log order, and the releases journal's fence skips
its tick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import orjson
from pydantic import BaseModel, ConfigDict

from stream_app.metrics import Metrics
from stream_app.release.journal import Journal, JournalError
from stream_app.release.publisher import Publisher
from stream_app.release.tree import NodeDraw
from stream_app.settings import Settings


class NodeRecord(BaseModel):
    """A ``NodeDraw`` as the topic holds it (JSON)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    window: int
    node: str
    units: int
    scale: float
    arity: int
    ticks: int


class KafkaNodeJournal:
    def __init__(self, settings: Settings, metrics: Metrics, publisher: Publisher) -> None:
        self.topic = settings.topic_tree_nodes
        self.journal = Journal(settings, self.topic, NodeRecord)
        self.publisher = publisher
        self._read: list[NodeRecord] | None = None  # the topic so far (None: not read yet)

    async def read(self, window: int) -> list[NodeDraw]:
        """Every draw of ``window`` in log order: the whole topic once, then what is new."""
        if self._read is None:
            self._read = await self.journal.read_all()
        else:
            self._read += await self.journal.drain()
        return [NodeDraw(**r.model_dump()) for r in self._read if r.window == window]

    async def append(self, draws: Sequence[NodeDraw]) -> None:
        for draw in draws:
            if not await self.publisher.send(self.topic, orjson.dumps(asdict(draw))):
                raise JournalError(f"{self.topic}: node {draw.node} of window {draw.window} "
                                   "not acknowledged")

    def forget(self) -> None:
        """Read the whole topic again at the next ``read`` (a takeover, a failed append)."""
        self._read = None

    async def close(self) -> None:
        await self.journal.close()
