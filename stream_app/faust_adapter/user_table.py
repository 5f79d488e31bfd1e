"""The users table as the ingest engine's store (``stream_app.domain.batch.UserStore``).

load/save work on the Faust table's store directly, without Faust's per-write bookkeeping; save
also queues the user's changelog record (sent by the input agent before the batch is acked). A
RocksDB store picks its partition database from Faust's current event, a context variable: it
is set to the record's event.

RocksDB (``store = "rocksdb://"``) outlives the process, so it must never be ahead of the
changelog: a state the broker did not acknowledge would survive a crash while its record is
lost, and the replayed input would find it already applied. Its writes wait in ``unacked``
(what ``load`` reads first) until the broker acknowledged their changelog records
(``acknowledged``). The memory store dies with the process: written at once.

Partition aggregates are rebuilt after a restart or a rebalance (docs/design.md, "Aggregates
after a restart"): ``ensure`` builds the missing ones in slices of ``REBUILD_SLICE`` users that
yield to the event loop, so timers and commits keep their time; RocksDB reads only the missing
partitions' databases, the memory store reads its users once for every missing partition. A
clean stop leaves RocksDB's aggregates beside their databases (``checkpoint``), taken instead of
a rebuild when the database has not moved since.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from faust.stores.memory import Store as MemoryTableStore
from faust.stores.rocksdb import Store as RocksDBTableStore
from faust.streams import _current_event
from faust.types import TP

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.draft import Stored
from stream_app.domain.rebuild import AggregateBuilder
from stream_app.faust_adapter.stored_rows import (
    At,
    Row,
    read_checkpoint,
    rocksdb_rows,
    slices,
    write_checkpoint,
)

Write = tuple[str, bytes, int]  # (user_id, stored value, input partition)

REBUILD_SLICE = 2000  # users decoded between two yields to the event loop (~10 ms)

log = logging.getLogger(__name__)


class UserTable:
    def __init__(self, users: Any) -> None:
        self.users = users  # the Faust table (values: the stored bytes of UserState)
        self.aggregates: dict[int, PartitionAggregate] = {}
        self._writes: list[Write] = []
        # RocksDB: user -> (newest value, partition) of writes not acknowledged yet
        self.unacked: dict[str, tuple[bytes, int]] = {}
        self._rebuilding: asyncio.Future[None] | None = None
        self._task: asyncio.Future[None] | None = None  # begin()'s (kept: not collected)
        self._built = asyncio.Event()  # set (then replaced) each time aggregates are built
        self._queue: list[int] = []  # the partitions the running rebuild builds next
        self._building: list[int] = []  # and those it builds now
        # the input partitions assigned now (the worker's): a memory-store rebuild, one pass
        # over every user, builds all that are missing
        self.assigned: Callable[[], Iterable[int]] = tuple
        self._generation = 0  # moves on each invalidate: a rebuild begun before is dropped
        self._at: dict[int, Any] = {}  # the current event per partition for acknowledged()

    @property
    def persistent(self) -> bool:
        return isinstance(self.users.data, RocksDBTableStore)

    def _set_event(self, event: Any) -> None:
        if not isinstance(self.users.data, MemoryTableStore):
            _current_event.set(weakref.ref(event) if event is not None else None)

    def load(self, user_id: str, event: Any) -> Stored | None:
        pending = self.unacked.get(user_id)
        if pending is not None:
            return pending[0]
        self._set_event(event)
        return self.users.data.get(user_id)  # type: ignore[no-any-return]

    def save(self, user_id: str, value: bytes, event: Any) -> None:
        partition = event.message.partition
        if self.persistent:
            self.unacked[user_id] = (value, partition)
        else:
            self._set_event(event)
            self.users.data[user_id] = value
        self._writes.append((user_id, value, partition))

    def acknowledged(self, values: dict[tuple[str, int], bytes]) -> None:
        """The broker acknowledged these changelog records (user, partition) -> value: a
        persistent store writes them now (a newer unacknowledged value stays pending)."""
        if not self.persistent:
            return
        store, unacked = self.users.data, self.unacked
        token = _current_event.get(None)
        try:
            for (user_id, partition), value in values.items():
                at = self._at.get(partition) or self._at.setdefault(partition, At(partition))
                _current_event.set(weakref.ref(at))
                store[user_id] = value
                pending = unacked.get(user_id)
                if pending is not None and pending[0] is value:
                    del unacked[user_id]
        finally:
            _current_event.set(token)

    # --- aggregates ------------------------------------------------------------------------
    def aggregate(self, partition: int, event: Any = None) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:  # not ensured first (tests, tools): built here, without yielding
            for _ in self._rebuild([partition]):
                pass
            agg = self.aggregates[partition]
        return agg

    def invalidate(self) -> None:
        """Drop every aggregate and any rebuild in progress (a rebalance changes the store)."""
        self.aggregates.clear()
        self._generation += 1

    async def ensure(self, partitions: Iterable[int], first: bool = True) -> None:
        """Build the missing aggregates of `partitions` in slices; callers share one rebuild
        and wait for their own partitions (`first`: built next, else after the others). A
        rebalance ends the wait: no rebuild begins while Faust restores the store (a caller
        that still needs an aggregate gets it from ``aggregate``, as before this method)."""
        wanted, generation = sorted(set(partitions)), self._generation
        while missing := [p for p in wanted if p not in self.aggregates]:
            if generation != self._generation:
                return
            if self._rebuilding is None or self._rebuilding.done():
                self._queue = sorted({*missing, *(p for p in self.assigned()
                                                  if p not in self.aggregates)})
                self._rebuilding = asyncio.ensure_future(self._rebuild_async(generation))
            elif first:  # before the others
                mine = [p for p in missing if p not in self._building]
                self._queue[:] = mine + [p for p in self._queue if p not in mine]
            else:  # after them
                self._queue += [p for p in missing
                                if p not in self._building and p not in self._queue]
            rebuilding = self._rebuilding
            progress = asyncio.ensure_future(self._built.wait())
            try:  # (not cancelled with the caller: asyncio.wait leaves both running)
                await asyncio.wait((rebuilding, progress), return_when=asyncio.FIRST_COMPLETED)
            finally:
                progress.cancel()
            if rebuilding.done():
                rebuilding.result()  # its error, if it failed

    def begin(self, partitions: Iterable[int]) -> list[int]:
        """Of `partitions`, those built; the others are rebuilt in the background (timers)."""
        wanted = sorted(set(partitions))
        built = [p for p in wanted if p in self.aggregates]
        if len(built) < len(wanted) and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self.ensure(wanted, first=False))
        return built

    async def _rebuild_async(self, generation: int) -> None:
        for _ in self._rebuild(self._queue, generation):
            await asyncio.sleep(0)

    def _rebuild(self, queue: list[int], generation: int | None = None) -> Iterator[None]:
        """Build the aggregates of the partitions in `queue` (taken from its front: callers
        may reorder it meanwhile), yielding after each slice: RocksDB's one partition database
        after the other, the memory store's all in one pass over its users. Abandoned once the
        store's `generation` (of when it was asked for) has passed."""
        generation = self._generation if generation is None else generation
        while queue:
            if self.persistent:
                group = [queue.pop(0)]
                # the checkpoint holds if the database persisted no other changelog offset
                # since (a tail recovered, our acknowledged writes); read once, then removed
                kept = read_checkpoint(self.users.data, group[0], self._persisted(group[0]))
                if kept is not None:
                    self._built_now({group[0]: kept}, "its checkpoint", 0, time.monotonic())
                    continue
            else:
                group, queue[:] = queue[:], []
            self._building = group
            started, rows = time.monotonic(), 0
            builder = AggregateBuilder(group)
            if generation != self._generation:
                return
            for chunk in slices(self._rows(group), REBUILD_SLICE):
                builder.add(chunk)
                rows += len(chunk)
                yield
                if generation != self._generation:
                    return  # a rebalance: built again for the new assignment
            self._built_now(builder.built(), "stored users", rows, started)

    def _built_now(self, built: dict[int, PartitionAggregate], source: str, rows: int,
                   started: float) -> None:
        for p, agg in built.items():
            self.aggregates.setdefault(p, agg)
        self._built.set()  # wakes the callers waiting for some of these
        self._built = asyncio.Event()
        log.info("rebuilt the aggregates of partitions %s from %s (%d) in %.2f s",
                 sorted(built), source, rows, time.monotonic() - started)

    # --- RocksDB checkpoints (stored_rows.py) -------------------------------------------------
    def _persisted(self, partition: int) -> int | None:
        tp = TP(self.users.changelog_topic.get_topic_name(), partition)
        return self.users.data.persisted_offset(tp)  # type: ignore[no-any-return]

    def checkpoint(self) -> list[int]:
        """At a clean stop, RocksDB only, when no write waits for its acknowledgement (the
        aggregates describe the disk): each beside its database with the changelog offset the
        database persisted. Returns the partitions written."""
        if not self.persistent or self.unacked:
            return []
        for p, agg in self.aggregates.items():
            write_checkpoint(self.users.data, agg, self._persisted(p))
        return sorted(self.aggregates)

    def _rows(self, partitions: list[int]) -> Iterator[Row]:
        """The stored users to build `partitions` from, as they are now (the unacknowledged
        writes over the store): a snapshot taken before the first row is returned."""
        store = self.users.data
        if isinstance(store, RocksDBTableStore):
            return rocksdb_rows(store, partitions, self.unacked)
        data = store.data if isinstance(store, MemoryTableStore) else store
        keys, values = list(data), list(data.values())  # one snapshot (no await between)
        return iter(zip(keys, values, strict=True))

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
