"""The ingest engine outside Faust (tests, benchmarks): a ``UserStore`` on a plain dict, and
one record at a time."""

from __future__ import annotations

from typing import Any

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.batch import Record
from stream_app.domain.draft import Stored
from stream_app.domain.ingest import Ingest
from stream_app.domain.state import UserState


class MemoryStore:
    """Like the worker's table it keeps the stored bytes per user and builds a partition's
    aggregate from the stored users the first time it is asked for."""

    def __init__(self) -> None:
        self.users: dict[str, Stored] = {}
        self.aggregates: dict[int, PartitionAggregate] = {}

    def load(self, user_id: str, event: Any = None) -> Stored | None:
        return self.users.get(user_id)

    def save(self, user_id: str, value: bytes, event: Any = None) -> None:
        self.users[user_id] = value

    def aggregate(self, partition: int, event: Any = None) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:
            users = [(u, UserState.from_stored(v)) for u, v in self.users.items()]
            agg = self.aggregates[partition] = PartitionAggregate.rebuild(partition, users)
        return agg

    def held_total(self) -> int:
        return sum(agg.held_count for agg in self.aggregates.values())


def handle_one(ingest: Ingest, topic: str, partition: int, key: bytes | None,
               raw: bytes | None) -> str | None:
    """One record; the dead-letter reason or None when accepted."""
    letters = ingest.handle_batch([Record(topic, partition, key, raw)])
    return letters[0][2] if letters else None
