"""A user's records keep the input file's order across the two input topics (``pufferfish send``).

The worker merges ``topic_reports`` and ``topic_membership`` by timestamp, but only what it has
fetched (docs/design.md, "The gate"): a record must be stamped no earlier than the user's
records before it, and must not be produced before the user's records in flight to the other
topic are acknowledged.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from stream_app.settings import Settings
from stream_app.tools import common


class UserOrder:
    """Stamps and waits for one ``send``: records are produced in file order."""

    def __init__(self, settings: Settings, timeout: float) -> None:
        self.settings, self.timeout = settings, timeout
        self._last_ms = self._last_report_ms = 0
        # per user (key): the topic of its records not acknowledged yet, and their futures
        self._unacked: dict[bytes, tuple[str, set[asyncio.Future[Any]]]] = {}

    def stamp(self, topic: str) -> int:
        """The record's CreateTime (ms): never earlier than the one before, and a membership
        record strictly later than every report before it — the worker merges the two topics
        by timestamp, membership first at equal ones (docs/design.md, "The gate"), so a leave
        sent after a report must not share its millisecond."""
        ms = max(time.time_ns() // 1_000_000, self._last_ms)
        if topic == self.settings.topic_reports:
            self._last_report_ms = ms
        elif ms <= self._last_report_ms:
            ms = self._last_report_ms + 1
        self._last_ms = ms
        return ms

    async def after_other_topic(self, key: bytes, topic: str) -> None:
        """Wait until the user's records sent to the other input topic are acknowledged.

        The worker merges the two topics by timestamp, but it can only merge what it has
        fetched: two records produced together, one per topic, are appended to their partitions
        independently, and Apache Kafka served a fetch with a leave appended and its user's
        report, stamped earlier, not yet (examples/events.jsonl sent twice: bob's report
        ignored as ``late_after_leave``, 5 dead letters instead of 6; issue 44). What the worker
        orders is a record acknowledged before the partner's record is produced
        (docs/design.md, "The gate"): so a user's record to one topic waits for the user's
        records in flight to the other. Files that send all joins, then all reports, wait at
        most once per user."""
        entry = self._unacked.get(key)
        if entry is None or entry[0] == topic:
            return
        _, pending = await asyncio.wait(set(entry[1]), timeout=self.timeout)
        if pending:
            raise common.broker_error(self.settings, f"{len(pending)} records not acknowledged:"
                                      f" no answer in {self.timeout:g} s from", "send")

    def track(self, key: bytes, topic: str, fut: asyncio.Future[Any]) -> None:
        entry = self._unacked.get(key)
        if entry is None or entry[0] != topic:
            entry = self._unacked[key] = (topic, set())
        futures = entry[1]
        futures.add(fut)

        def settled(done: asyncio.Future[Any]) -> None:
            futures.discard(done)
            if not futures and self._unacked.get(key) is entry:
                del self._unacked[key]

        fut.add_done_callback(settled)
