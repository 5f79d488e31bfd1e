"""stream_app/write_acks: a batch's sends settle together; a failed one is reported with its
kind; a held-back event is never acked by Faust's message reference counting.

The worker's end-to-end behaviour (a real failing send, a real broker, committed offsets) is
tests/reliability/test_failed_writes.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError
from faust.types import TP
from faust.types.tuples import Message

from stream_app.faust_adapter.write_acks import (
    PendingWrites,
    WriteNotAcknowledged,
    first_offsets,
    hold_back,
)


def later(loop: asyncio.AbstractEventLoop, delay: float, result: Any = None,
          error: BaseException | None = None) -> asyncio.Future[Any]:
    fut: asyncio.Future[Any] = loop.create_future()
    if error is None:
        loop.call_later(delay, fut.set_result, result)
    else:
        loop.call_later(delay, fut.set_exception, error)
    return fut


async def queued(futures: Sequence[asyncio.Future[Any]]) -> list[asyncio.Future[Any]]:
    return list(futures)


async def test_results_by_kind_in_send_order() -> None:
    loop = asyncio.get_running_loop()
    writes = PendingWrites()
    await writes.issue("changelog", queued([later(loop, 0.02, "c1"), later(loop, 0.01, "c2")]))
    await writes.issue("dead letter", queued([later(loop, 0.0, "d1")]))
    assert len(writes) == 3
    assert await writes.acknowledged() == {"changelog": ["c1", "c2"], "dead letter": ["d1"]}
    assert len(writes) == 0 and await writes.acknowledged() == {}


async def test_a_failed_send_is_reported_after_every_send_settled() -> None:
    loop = asyncio.get_running_loop()
    slow = later(loop, 0.05, "c2")
    writes = PendingWrites()
    await writes.issue("changelog", queued([later(loop, 0.0, error=KafkaTimeoutError()), slow]))
    with pytest.raises(WriteNotAcknowledged) as info:
        await writes.acknowledged()
    assert info.value.what == "changelog" and isinstance(info.value.cause, KafkaTimeoutError)
    assert str(info.value) == ("a changelog record was not acknowledged by the broker "
                               "(KafkaTimeoutError)")
    assert slow.done()  # waited for: its fate is known before the worker stops


async def test_a_send_cancelled_is_not_acknowledged() -> None:
    fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    fut.cancel()
    writes = PendingWrites()
    await writes.issue("dead letter", queued([fut]))
    with pytest.raises(WriteNotAcknowledged, match="dead letter"):
        await writes.acknowledged()


async def test_a_send_refused_at_once_is_not_acknowledged() -> None:
    async def refused() -> list[asyncio.Future[Any]]:
        raise KafkaTimeoutError("buffer full")

    with pytest.raises(WriteNotAcknowledged, match="changelog") as info:
        await PendingWrites().issue("changelog", refused())
    assert isinstance(info.value.cause, KafkaTimeoutError)


def message(partition: int, offset: int) -> Message:
    msg = Message("reports", partition, offset, timestamp=0.0, timestamp_type=0, headers=None,
                  key=b"k", value=b"v", checksum=None, tp=TP("reports", partition))
    msg.incref()  # the stream's reference, released by take_events' ack
    return msg


def test_a_held_back_event_is_never_acked() -> None:
    held, normal = message(0, 5), message(0, 6)
    hold_back([SimpleNamespace(message=held)])
    # what take_events' ack does for each event of the batch (Event.ack -> Message.ack)
    assert held.ack(consumer=None) is False and not held.acked
    assert normal.ack(consumer=None) is True and normal.acked


def test_first_offsets_name_each_partition_once() -> None:
    events = [SimpleNamespace(message=message(p, o)) for p, o in [(1, 7), (0, 3), (1, 8)]]
    assert first_offsets(events) == "reports[0]@3, reports[1]@7"
