"""The worker's Faust consumer: two settings Faust does not expose (docs/design.md, "Throughput").

``consumer_fetch_max_wait_seconds``: how long the broker may hold a fetch that finds no new
record. Faust hard-codes 1.5 s; a real Kafka answers as soon as a record arrives, but a broker
that does not (tansu) holds every idle fetch that long, and a record then waits up to 1.5 s on
each hop (input topic, partials topic) before a release can include it.

``drain_eager`` (off by default): Faust's per-record drain step without its tasks.

Faust's ``Consumer._drain_messages`` hands every fetched record to the conductor with
``wait_first(callback(message), suspend_flow.wait())``: two tasks (plus the consumer's
stopped/crashed watchers) and their cancellations per record, so that a callback stuck on a full
stream buffer, a suspended flow or a full producer buffer is abandoned when a rebalance
suspends the flow. That bookkeeping is the largest cost of a Faust stream (docs/design.md,
"Throughput").

Here the callback runs *eagerly*, as Python 3.12's ``asyncio.eager_task_factory`` would: its
first step runs inline. The conductor's callback awaits only when it must block (flow control,
producer back-pressure, a full buffer); if it completes without suspending — the common case —
no task is created. If it does suspend, the partly-run coroutine is resumed inside the same
``wait_first`` as before, so a rebalance still abandons it exactly as in Faust. Rebalance safety
is therefore unchanged: the only callbacks that skip ``wait_first`` are those that never gave
the event loop a chance to run a rebalance in the middle of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import Any

from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport
from mode.services import WaitResults


class _Resumed:
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


@dataclass(frozen=True)
class ConsumerTuning:
    fetch_max_wait_ms: int = 1500  # Faust's own value
    drain_eager: bool = False


def tuning_of(app: Any) -> ConsumerTuning:
    return getattr(app, "consumer_tuning", None) or ConsumerTuning()


class TunedConsumerThread(AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # read by AIOKafkaConsumer.start() when it builds its Fetcher (not started yet here)
        consumer._fetch_max_wait_ms = tuning_of(self.app).fetch_max_wait_ms
        return consumer


class PufferfishConsumer(AIOKafkaConsumer):
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return TunedConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _is_drain_step(self, coros: tuple[Any, ...]) -> bool:
        """The drain loop's call: (callback coroutine, ``self.suspend_flow.wait()``)."""
        if len(coros) != 2 or not all(asyncio.iscoroutine(c) for c in coros):
            return False
        frame = getattr(coros[1], "cr_frame", None)
        return frame is not None and frame.f_locals.get("self") is self.suspend_flow

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:
        eager = tuning_of(self.app).drain_eager
        if not eager or timeout is not None or not self._is_drain_step(coros):
            return await super().wait_first(*coros, timeout=timeout)
        callback, suspended = coros
        try:
            first = callback.send(None)
        except StopIteration as done:  # completed without suspending: no task needed
            suspended.close()
            return WaitResults([callback], [done.value], False)
        except BaseException:
            suspended.close()
            raise
        return await super().wait_first(_Resumed(callback, first), suspended)


class PufferfishTransport(AIOKafkaTransport):
    Consumer = PufferfishConsumer
