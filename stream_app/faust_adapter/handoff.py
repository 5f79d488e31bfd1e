"""The worker consumer's hand-off of one fetched record to Faust's conductor
(docs/design.md, "Throughput": the per-record hand-off, the callback's first step inline).

Faust's rebalance safety is kept — a callback stuck on a full stream buffer, a suspended flow or
producer back-pressure is abandoned when a rebalance suspends the flow — with one long-lived
guard task instead of Faust's four tasks per record. The callback's first step runs inline, as
Python 3.12's ``asyncio.eager_task_factory`` would; if it completes without suspending — the
common case — no task is made at all. If it does suspend, the partly-run coroutine is resumed in
a task the guard can cancel, so a rebalance still abandons it: the only callbacks that skip the
guard are those that never gave the event loop a chance to run a rebalance in the middle of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Generator
from typing import Any, cast

from stream_app.faust_adapter.offsets import Verdict

logger = logging.getLogger(__name__)


class Resumed:
    """Awaitable that continues a coroutine whose first step already ran and yielded `first`
    (the future it waits on): what ``yield from`` would have done had the first step run
    inside a task."""

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro, self.first = coro, first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self.coro, self.first
        while True:
            try:
                sent = yield pending
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - cancellation goes to the coroutine
                try:
                    pending = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as stop:
                    return stop.value



class GuardedHandOff:
    """Mixin for the Faust consumer (a mode Service with ``suspend_flow``; consumer.py supplies
    ``_expected`` and ``_seek_back``)."""

    _guard: asyncio.Future[Any] | None = None
    _handing: asyncio.Future[Any] | None = None  # the hand-off the guard would abandon

    async def _hand_over(self, coro: Any) -> bool:
        """Run the conductor's callback for one record unless the flow is suspended (or the
        consumer stops) first: Faust's rebalance safety. True when the callback completed.

        Faust waits for ``wait_first(callback, suspend_flow.wait())``: four tasks per record
        (the callback, the suspend wait, mode's stopped and crashed watchers) and three
        cancellations. Here the callback's first step runs inline; only a callback that has to
        wait becomes a task, and one long-lived guard task waits for those three events on
        behalf of every record and, when one happens, cancels the hand-off in progress."""
        guard = self._flow_guard()
        if guard.done() or cast(Any, self).suspend_flow.is_set():
            coro.close()  # not even started (the drain loop seeks back)
            return False
        try:
            first = coro.send(None)
        except StopIteration:  # completed without suspending: no task needed
            return True
        task = self._handing = asyncio.ensure_future(Resumed(coro, first))
        try:
            await task  # a callback error propagates, as in Faust
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise  # the drain loop itself is stopping (the hand-off was cancelled with it)
            return False  # the guard abandoned it: a rebalance suspended the flow, or a stop
        finally:
            self._handing = None
        return True

    async def _offer(self, tp: Any, message: Any, stamp: int, skip: set[Any]) -> bool:
        """Hand one fetched record over if it is the one its partition expects (offsets.py).
        True when it reached the streams; `tp` joins `skip` when the rest of its batch is
        stale."""
        consumer: Any = self
        expected = consumer._expected
        offset = message.offset
        verdict = expected.judge(tp, offset, stamp)
        if verdict is Verdict.DROP:
            return False
        if verdict is Verdict.WAIT:
            skip.add(tp)  # fetched again once the seek in flight is done
            return False
        if verdict is Verdict.RESEEK:
            skip.add(tp)
            consumer._seek_back(tp, expected.expected(tp), f"record {offset} is past the next one "
                            "expected, and the partition was sought since the fetch began or "
                            "this is its first record since a seek")
            return False
        epoch = expected.epoch(tp)
        if verdict is Verdict.GAP:
            start = expected.skip_gap(tp, offset)
            if offset - start > 1:  # more than one marker: a compaction, an aborted transaction
                logger.info("acknowledging %s[%d] offsets %d..%d as a gap (no record there "
                            "since the last seek)", tp.topic, tp.partition, start, offset - 1)
            if consumer.app.topics.acks_enabled_for(message.topic):
                await consumer._add_gap(tp, start, offset - 1)  # Faust's end is inclusive
        if consumer._commit_every is not None and consumer._n_acked >= consumer._commit_every:
            consumer._n_acked = 0
            await consumer.commit()
        if expected.epoch(tp) != epoch:
            skip.add(tp)  # sought while acknowledging or committing: stale now
            return False
        if await self._hand_over(consumer.callback(message)):
            if expected.handed_over(tp, offset, epoch):
                consumer._read_offset[tp] = offset
                return True
            skip.add(tp)  # sought meanwhile: the rest of this batch is stale
            return False
        skip.add(tp)
        if expected.epoch(tp) == epoch:  # else the seek meanwhile decides
            consumer._seek_back(tp, offset, "its hand-off was abandoned")
        return False

    def _flow_guard(self) -> asyncio.Future[Any]:
        """A task that ends when the flow is suspended or the consumer stops or crashes, and
        then abandons the hand-off in progress; renewed once the flow runs again."""
        consumer: Any = self
        guard = self._guard
        if guard is None or (guard.done() and not consumer.suspend_flow.is_set()
                             and not consumer.should_stop):
            waiting = consumer.wait_first(consumer.suspend_flow.wait())
            guard = self._guard = asyncio.ensure_future(waiting)
            guard.add_done_callback(self._abandon_hand_off)
        return guard

    def _abandon_hand_off(self, guard: asyncio.Future[Any]) -> None:
        if guard is self._guard and self._handing is not None:
            self._handing.cancel()
