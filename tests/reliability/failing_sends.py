"""`pufferfish run` with one producer send that the broker never acknowledges (test-only entry).

    FAILING_SEND_TOPIC=<topic> [FAILING_SEND_KEY=<key>] python -m tests.reliability.failing_sends

The first send to FAILING_SEND_TOPIC (with that record key, when given) is not transmitted:
Faust's aiokafka producer returns a future failed with KafkaTimeoutError, as aiokafka does
when a batch expires unacknowledged. Every other send goes to the broker unchanged. The
worker is the product's (stream_app.faust_adapter.runner.main); only the producer's ``send`` is
wrapped.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from aiokafka.errors import KafkaTimeoutError
from faust.transport.drivers.aiokafka import Producer

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


def main() -> int:
    key = os.environ.get("FAILING_SEND_KEY")
    fail_first_send(os.environ["FAILING_SEND_TOPIC"], key.encode() if key else None)
    return runner.main([])


if __name__ == "__main__":
    sys.exit(main())
