"""The users table as the ingest engine's store (``stream_app.domain.batch.UserStore``).

load/save work on the Faust table's store directly, without Faust's per-write bookkeeping; save
also queues the user's changelog record (sent by the input agent before the batch is acked). A
RocksDB store picks its partition database from Faust's current event, a context variable: it
is set to the record's event.
"""

from __future__ import annotations

import weakref
from typing import Any

from faust.stores.memory import Store as MemoryTableStore
from faust.streams import _current_event

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.draft import Stored
from stream_app.domain.state import UserState

Write = tuple[str, bytes, int]  # (user_id, stored value, input partition)


class UserTable:
    def __init__(self, users: Any) -> None:
        self.users = users  # the Faust table (values: the stored bytes of UserState)
        self.aggregates: dict[int, PartitionAggregate] = {}
        self._writes: list[Write] = []

    def _set_event(self, event: Any) -> None:
        if not isinstance(self.users.data, MemoryTableStore):
            _current_event.set(weakref.ref(event))

    def load(self, user_id: str, event: Any) -> Stored | None:
        self._set_event(event)
        return self.users.data.get(user_id)  # type: ignore[no-any-return]

    def save(self, user_id: str, value: bytes, event: Any) -> None:
        self._set_event(event)
        self.users.data[user_id] = value
        self._writes.append((user_id, value, event.message.partition))

    def aggregate(self, partition: int, event: Any = None) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:
            users = [(k, UserState.from_stored(v)) for k, v in self.users.data.items()
                     if v is not None]
            agg = self.aggregates[partition] = PartitionAggregate.rebuild(partition, users)
        return agg

    def held_total(self) -> int:
        return sum(agg.held_count for agg in self.aggregates.values())

    def take_writes(self) -> list[Write]:
        """The user writes queued since the last call (their changelog records are owed)."""
        writes, self._writes = self._writes, []
        return writes

    def without_event(self) -> Any:
        """Token for ``reset_event``: no current event (a timer's writes)."""
        return _current_event.set(None)

    def reset_event(self, token: Any) -> None:
        _current_event.reset(token)
