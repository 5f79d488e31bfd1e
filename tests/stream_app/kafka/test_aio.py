"""stream_app/aio.within: a bound that holds when the call ignores cancellation."""

from __future__ import annotations

import asyncio
import time

import pytest

from stream_app.kafka.aio import within


async def test_a_finished_call_is_returned_with_its_result() -> None:
    async def quick() -> int:
        await asyncio.sleep(0)
        return 7

    task = await within(quick(), 5.0)
    assert task is not None and task.result() == 7


async def test_a_call_that_ignores_cancellation_is_left_behind_on_time() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # like an aiokafka call on a dead connection

    started = time.monotonic()
    assert await within(stubborn(), 0.2) is None
    assert time.monotonic() - started < 2.0
    release.set()  # let the abandoned call end


async def test_cancelling_the_caller_cancels_the_call() -> None:
    seen: list[str] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    caller = asyncio.ensure_future(within(slow(), 30.0))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.sleep(0)
    assert seen == ["cancelled"]
