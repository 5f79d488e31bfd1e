"""A one-partition Kafka log and client position, fetched by a drain loop (ours or Faust's own
``Consumer._drain_messages``) through the consumer's ``getmany``, as aiokafka would serve it.

A fetch returns up to `max_records` records at or past the position and moves the position past
the last one; when no record follows, past the log end (a trailing transaction marker). A seek
sets the position. A batch already returned is not changed by a later seek (it is the caller's
list), as with aiokafka. Counts the fetches and seeks the loop caused.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP

TP0 = TP("reports", 0)


@dataclass
class Record:
    offset: int
    topic: str = "reports"
    key: bytes = b"u"
    value: bytes = b"{}"
    timestamp: float = 0.0  # the gate's merge key (alignment.py)


def compacted_offsets(total: int, survivors: int, seed: int = 7) -> list[int]:
    """`survivors` offsets of `total`, chosen without a pattern (a fixed seed), the last one
    always kept (compaction never removes the newest record of a key)."""
    import random

    rng = random.Random(seed)
    kept = set(rng.sample(range(total - 1), survivors - 1))
    return sorted(kept | {total - 1})


def transactional_offsets(transactions: int, size: int) -> list[int]:
    """Records of `transactions` committed transactions of `size` records each: every commit
    marker takes the offset after its transaction's records."""
    return [t * (size + 1) + i for t in range(transactions) for i in range(size)]


class ScriptedLog:
    def __init__(self, consumer: Any, offsets: list[int], *, max_records: int = 500,
                 log_end: int | None = None, acks: bool = True) -> None:
        self.consumer = consumer
        self.offsets = sorted(offsets)
        self.max_records = max_records
        self.log_end = log_end if log_end is not None else self.offsets[-1] + 2
        self.position = 0
        self.fetches = 0
        self.seeks: list[int] = []
        self.delivered: list[int] = []
        self.assigned = {TP0}
        self.fetcher = SimpleNamespace(_stopped=asyncio.Event())
        self.on_record: Callable[[int], Awaitable[None]] | None = None
        self.during_fetch: Callable[[], Awaitable[None]] | None = None
        self.resume_flow_before_fetch = False
        consumer.callback = self._callback
        consumer.getmany = self._getmany
        consumer.assignment = lambda: set(self.assigned)
        self.seeks_in_thread = 0  # seek_wait calls still running
        consumer._thread = SimpleNamespace(seek=self._seek, position=self._position,
                                           seek_wait=self._seek_wait)
        consumer.app.topics.acks_enabled_for = lambda topic: acks

    def _seek(self, tp: TP, offset: int) -> None:
        self.seeks.append(offset)
        self.position = offset

    async def _seek_wait(self, partitions: dict[TP, int]) -> None:
        """As Faust's: the seek runs in the client thread and is waited for; the drain loop
        can fetch meanwhile (here: right after the seek, before the wait ends)."""
        self.seeks_in_thread += 1
        try:
            for tp, offset in partitions.items():
                self._seek(tp, offset)
                if offset > 0:
                    self.consumer._read_offset[tp] = offset
                else:
                    self.consumer._read_offset.pop(tp, None)
            await asyncio.sleep(0.05)
        finally:
            self.seeks_in_thread -= 1

    async def _position(self, tp: TP) -> int:
        return self.position

    def _fetch(self) -> list[int]:
        self.fetches += 1
        if TP0 not in self.assigned:
            return []
        start = bisect.bisect_left(self.offsets, self.position)
        batch = self.offsets[start:start + self.max_records]
        following = start + len(batch)
        if following < len(self.offsets):
            self.position = self.offsets[following]  # the gap before it holds no record
        else:
            self.position = max(self.position, self.log_end)
        return batch

    async def _callback(self, message: Record) -> None:
        if self.on_record is not None:
            await self.on_record(message.offset)
        self.delivered.append(message.offset)

    async def _getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Record]]:
        if self.resume_flow_before_fetch:
            self.consumer.suspend_flow.clear()
        batch = self._fetch()
        if self.during_fetch is not None:
            hook, self.during_fetch = self.during_fetch, None
            await hook()  # e.g. a rebalance seeks while the fetched batch is on its way
        done = self.position >= self.log_end and not self.seeks_in_thread
        if not batch and (done or TP0 not in self.assigned):
            self.fetcher._stopped.set()  # caught up: the drain loop ends
            return
        for offset in batch:
            yield TP0, Record(offset)

    async def drain(self, loop: str) -> None:
        """Run the drain loop to the end of the log: "ours" or "stock" (Faust's own)."""
        if loop == "ours":
            run = self.consumer._drain_messages(self.fetcher)
        else:
            run = FaustConsumer._drain_messages(self.consumer, self.fetcher)
        await asyncio.wait_for(run, 20)
