"""`pufferfish run` with one producer send that the broker never acknowledges (test-only entry).

    FAILING_SEND_TOPIC=<topic> [FAILING_SEND_KEY=<key>] [FAILING_SEND_THREAD_LINGER=<s>] \
        python -m tests.reliability.failing_sends

The first send to FAILING_SEND_TOPIC (with that record key, when given) is not transmitted:
Faust's aiokafka producer returns a future failed with KafkaTimeoutError, as aiokafka does
when a batch expires unacknowledged. Every other send goes to the broker unchanged. The
worker is the product's (stream_app.faust_adapter.runner.main); only the producer's ``send`` is
wrapped.

FAILING_SEND_THREAD_LINGER makes certain the interleaving of a slow machine (a worker hung in
CI so): the consumer's client thread, once told to stop, stops its method queue and then
lingers that many seconds before its loop closes, and Faust's stop waits for the queue to stop
before it commits (a call queued then is never answered unless the worker skips it).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from aiokafka.errors import KafkaTimeoutError
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import Producer
from mode.threads import QueueServiceThread

from stream_app.faust_adapter import runner


def fail_first_send(topic: str, key: bytes | None) -> None:
    real_send = Producer.send
    failed = False

    async def send(self: Producer, send_topic: str, send_key: bytes | None,
                   *args: Any, **kwargs: Any) -> Any:
        nonlocal failed
        if not failed and send_topic == topic and (key is None or send_key == key):
            failed = True
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.set_exception(KafkaTimeoutError("injected: never acknowledged"))
            return future
        return await real_send(self, send_topic, send_key, *args, **kwargs)

    Producer.send = send  # type: ignore[method-assign]


def linger_after_the_method_queue(seconds: float) -> None:
    real_thread_stop = QueueServiceThread.on_thread_stop
    real_wait_empty = Consumer.wait_empty

    async def on_thread_stop(self: QueueServiceThread) -> None:
        await real_thread_stop(self)
        await asyncio.sleep(seconds)

    async def wait_empty(self: Any) -> None:
        queue = self._thread._method_queue
        for _ in range(100 if self.should_stop else 0):  # a stop (not a rebalance): up to 5 s
            if queue is None or queue.should_stop:
                break
            await asyncio.sleep(0.05)
        await real_wait_empty(self)

    QueueServiceThread.on_thread_stop = on_thread_stop  # type: ignore[method-assign]
    Consumer.wait_empty = wait_empty  # type: ignore[method-assign]


def main() -> int:
    key = os.environ.get("FAILING_SEND_KEY")
    fail_first_send(os.environ["FAILING_SEND_TOPIC"], key.encode() if key else None)
    linger = os.environ.get("FAILING_SEND_THREAD_LINGER")
    if linger:
        linger_after_the_method_queue(float(linger))
    return runner.main([])


if __name__ == "__main__":
    sys.exit(main())
