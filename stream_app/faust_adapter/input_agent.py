"""The input agent: batches of input records through the ingest engine, then their writes.

take_events acks a batch's events (so their offsets may be committed) when the agent asks for
the next batch, or when the generator is closed. Each batch holds one more reference of its own
(hold_back), released only once the broker has acknowledged all of its writes. The writes of
the batches of ``changelog_flush_seconds`` are sent together (write_window.py: one changelog
record per user, its last value); the next window is collected and applied while the previous
one's writes are in flight (one window at most, in order), and a window whose writes did not
all succeed never reaches the consumer's acks (docs/design.md, "Delivery semantics").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson

from stream_app.domain.admitted_sums import TreeState
from stream_app.domain.batch import DeadLetters
from stream_app.domain.ingest import Ingest
from stream_app.domain.models import dead_letter, to_bytes
from stream_app.faust_adapter.stop_deadline import exit_after
from stream_app.faust_adapter.user_table import UserTable
from stream_app.faust_adapter.write_acks import (
    EXIT_WRITE_NOT_ACKNOWLEDGED,
    PendingWrites,
    WriteNotAcknowledged,
    first_offsets,
    hold_back,
)
from stream_app.faust_adapter.write_window import WriteWindow
from stream_app.metrics import Metrics
from stream_app.settings import Settings

log = logging.getLogger(__name__)

# a commit that takes longer (the broker may be what failed) is given up: the stop goes on
COMMIT_BEFORE_STOP_SECONDS = 10.0


class InputAgent:
    def __init__(self, settings: Settings, ingest: Ingest, table: UserTable, app: Any,
                 deadletter_topic: Any, metrics: Metrics) -> None:
        self.settings = settings
        self.ingest = ingest
        self.table = table
        self.app = app
        self.deadletter_topic = deadletter_topic
        self.metrics = metrics
        # the writes of the batches applied since the last flush (changelog_flush_seconds)
        self.window = WriteWindow()
        self._timer: asyncio.TimerHandle | None = None
        # the newest window sent whose writes are not all acknowledged yet (windows in order)
        self.inflight: asyncio.Future[None] | None = None
        # set when a batch's record was not acknowledged: the worker stops (runner: exit 75)
        self.write_failure: WriteNotAcknowledged | None = None
        # tree mode: input partitions with writes sent but not acknowledged (how many windows)
        self.inflight_partitions: Counter[int] = Counter()

    async def process(self, stream: Any) -> None:
        # Faust's worker leaves the root logger at DEBUG (its spinner): every debug call of
        # Faust and aiokafka would build a record (measured -19 %). Reset it to ours.
        logging.getLogger().setLevel(self.settings.log_level.upper())
        s = self.settings
        hooks = self.app.consumer.on_flow_stopped  # a rebalance or the stop: flush at once
        if self.flush not in hooks:
            hooks.append(self.flush)
        try:
            async for events in stream.take_events(s.batch_max_events, s.batch_within_seconds):
                letters = self.handle_batch(events)
                hold_back(events)
                now = time.monotonic()
                self.window.add(letters, self.table.take_writes(), events, now)
                if self.window.due(now, s.changelog_flush_seconds):
                    if self.inflight is not None:
                        await self.inflight  # at most one window in flight (and in order)
                    self.flush()
                else:
                    self._flush_later()
            await self.flushed()
        except BaseException:
            if self.inflight is not None and not self.inflight.done():
                self.inflight.cancel()  # its events stay held back: processed again later
            raise

    def flush(self) -> asyncio.Future[None] | None:
        """Send the open window's writes after the previous window's (returns the future that
        releases its events once they are acknowledged)."""
        window, self.window = self.window, WriteWindow()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if window:
            touched = {p for _, p in window.values}
            states = ({p: self.table.aggregate(p).tree_state() for p in touched}
                      if self.ingest.applier.rules.admission is not None else {})
            self.inflight_partitions.update(touched)
            self.inflight = asyncio.ensure_future(
                self._write_then_release(window, self.inflight, states))
        return self.inflight

    def pending(self) -> set[int]:
        """Input partitions whose aggregate holds writes not acknowledged yet (tree mode shows
        their ``durable`` state: a crash could take those writes back)."""
        return {p for p, n in self.inflight_partitions.items() if n > 0} | {
            p for _, p in self.window.values}

    async def flushed(self) -> None:
        """Flush the open window and wait until every window sent is settled."""
        inflight = self.flush()
        if inflight is not None:
            await inflight

    def _flush_later(self) -> None:
        """A window is flushed when it is due even if no further batch comes."""
        if self._timer is None and self.window:
            self._timer = asyncio.get_running_loop().call_later(
                self.settings.changelog_flush_seconds, self.flush)

    async def _write_then_release(self, window: WriteWindow,
                                  previous: asyncio.Future[None] | None,
                                  states: dict[int, TreeState]) -> None:
        """Write a window after the previous one, then release its events (their offsets may
        be committed); a write not acknowledged stops the worker with the window held back."""
        if previous is not None:
            await asyncio.shield(previous)  # cancelling this window does not cancel that one
        try:
            await self._write_window(window.letters, window.values)
        except WriteNotAcknowledged as exc:
            await self._stop_on_lost_write(exc, window.events)
            return
        for event in window.events:
            event.ack()
        self.inflight_partitions.subtract({p for _, p in window.values})
        for partition, state in states.items():  # acknowledged: what a partial may show
            agg = self.table.aggregates.get(partition)
            if agg is not None:
                agg.durable, agg.dirty = state, True

    def handle_batch(self, events: Sequence[Any]) -> DeadLetters:
        token = self.table.without_event()
        try:
            return self.ingest.handle_batch(events)
        finally:
            self.table.reset_event(token)

    async def _write_window(self, letters: DeadLetters,
                            values: dict[tuple[str, int], bytes]) -> None:
        """Send the window's dead letters, then its changelog records, and wait until the
        broker has acknowledged every one; WriteNotAcknowledged otherwise. Dead letters are
        acknowledged first: a user's stored state records the input offsets it reflects (a
        replay skips them), so a dead letter must be written before that state is, or a crash
        between the two would lose it (at least once, as before offsets were recorded)."""
        writes = PendingWrites()
        if letters:
            await writes.issue("dead letter", self._send_dead_letters(letters))
            await writes.acknowledged()
        await writes.issue("changelog", self._send_changelog(values))
        results = await writes.acknowledged()
        if results.get("changelog"):
            self._changelog_persisted(results["changelog"])

    async def _send_changelog(self, values: dict[tuple[str, int], bytes]) -> list[Any]:
        """One changelog record per (user, input partition) written in the window, its last
        value: what ``users[k] = v`` would send, without its per-write overhead (a user's
        records span two partitions only when its key moved). Returns the sends' futures."""
        if not values:
            return []
        topic = self.table.users.changelog_topic.get_topic_name()
        send = self.app.producer.send
        return [await send(topic, orjson.dumps(user_id), value, partition, None, None)
                for (user_id, partition), value in values.items()]

    def _changelog_persisted(self, results: Sequence[Any]) -> None:
        """What Faust's table does: a persistent store (RocksDB) records the changelog offset
        (the newest of each changelog partition)."""
        store: Any = self.table.users.data
        for tp, offset in {res.topic_partition: res.offset for res in results}.items():
            store.set_persisted_offset(tp, offset)

    async def _send_dead_letters(self, letters: DeadLetters) -> list[Any]:
        """Queue the dead letters; returns the sends' futures."""
        now = time.time()
        sends = [
            self.deadletter_topic.send(value=to_bytes(dead_letter(
                letter.topic, letter.raw, letter.reason, now, partition=letter.partition,
                offset=letter.offset, detail=letter.detail,
                include_raw=self.settings.deadletter_include_raw)))
            for letter in letters
        ]
        return list(await asyncio.gather(*sends))

    async def _stop_on_lost_write(self, exc: WriteNotAcknowledged, events: Sequence[Any]
                                  ) -> None:
        """Stop the worker, non-zero (mode's crash: the worker stops, then exits 1; the
        runner makes it 75), with one ERROR line (quiet_stop.py) and within
        shutdown_timeout_seconds (stop_deadline.py). The acked offsets are committed first,
        while the consumer's thread runs (after the crash its commits are skipped:
        commit_guard.py); the held-back window is never acked, so the commit ends before it.
        Waits until the shutdown cancels this task."""
        self.write_failure = exc
        self.metrics.broker_errors.inc()
        line = ("stopping the worker: %s; the input offsets from %s are not committed and are "
                "processed again after a restart", exc, first_offsets(events))
        quiet = self.app.quiet_stop  # the one ERROR line of this stop (quiet_stop.py)
        if quiet is not None:
            quiet.stopping(log, *line)
        else:
            log.error(*line)
        exit_after(self.settings.shutdown_timeout_seconds, EXIT_WRITE_NOT_ACKNOWLEDGED)
        await self._commit_acked()
        await self.app.crash(exc)
        await asyncio.Event().wait()

    async def _commit_acked(self) -> None:
        try:
            await asyncio.wait_for(self.app.consumer.commit(), COMMIT_BEFORE_STOP_SECONDS)
        except Exception as exc:  # noqa: BLE001 - the stop goes on; a restart replays more
            log.warning("the acknowledged input offsets were not committed before the stop "
                        "(%s)", type(exc).__name__)

    def expire_held(self, partitions: Sequence[int]) -> None:
        """Dead-letter (not_present) the held reports whose join_grace_seconds passed, on the
        given input partitions: the users written without them join the open window (after
        the batches before, as every write of a user does), which is then flushed."""
        token = self.table.without_event()
        try:
            letters = self.ingest.expire_held(partitions)
        finally:
            self.table.reset_event(token)
        writes = self.table.take_writes()
        if letters or writes:
            self.window.add(letters, writes, (), time.monotonic())
            self._flush_later()
