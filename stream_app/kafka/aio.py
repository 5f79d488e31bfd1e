"""A time bound for broker calls that holds even when the call ignores cancellation.

asyncio.wait_for waits for a cancelled call to finish; aiokafka's producer send and stop can hang
on a dead connection (aio-libs/aiokafka#1101), so a late call is cancelled and left behind
instead of awaited (kept referenced until it ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

_abandoned: set[asyncio.Future[Any]] = set()


async def within(aw: Awaitable[T], seconds: float) -> asyncio.Future[T] | None:
    """The finished call (its result or exception still to be read), or None when it did not
    finish within `seconds` (it is then cancelled and left behind)."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        _abandoned.add(task)
        task.add_done_callback(_abandoned.discard)
        return None
    return task
