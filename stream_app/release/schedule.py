"""The worker's public-clock scheduler: every tick handled once, in order, at its due time.

Tick k is due at k x ``release_period_seconds`` since the epoch (core.clock). The scheduler
sleeps until the due time of ``Releaser.next_tick()`` on the wall clock, then hands that tick to
``Releaser.on_clock``. A tick that comes late (a busy event loop, a slow broker, a takeover
catching up) is handed over late, never skipped nor merged with the next: the lateness is
``pufferfish_release_tick_lateness_seconds``. A tick left unsettled (not the owner, paused,
broker trouble) is tried again shortly. Unlike Faust's ``app.timer``, the sleep is computed from
the due time each round, so it does not drift under load.

A worker that does not own the releases checks every ``OWNER_POLL_SECONDS`` whether it has become
the owner (a takeover: the dead owner's ticks are due already), instead of waiting out the retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from stream_app.release.releaser import Releaser

log = logging.getLogger(__name__)

MAX_SLEEP_SECONDS = 1.0  # re-read the wall clock at least this often (it may be stepped)
RETRY_SECONDS = 1.0  # an unsettled tick is tried again after min(this, the period)
OWNER_POLL_SECONDS = 0.1  # a cheap check (no I/O): the assignment and the recovery's state


async def run_clock(releaser: Releaser, owns: Callable[[], bool] | None = None) -> None:
    """Run the public clock until cancelled (the worker's shutdown). ``owns``: whether this
    worker owns the releases now (None: retry after the full delay)."""
    retry = min(RETRY_SECONDS, releaser.settings.release_period_seconds)
    while True:
        tick = releaser.next_tick()
        wait = releaser.ticks.due(tick) - time.time()
        if wait > 0:
            await asyncio.sleep(min(wait, MAX_SLEEP_SECONDS))
            continue
        try:
            await releaser.on_clock(tick)
        except Exception as exc:  # noqa: BLE001 - the clock must keep running
            releaser.metrics.broker_errors.inc()
            log.error("tick %d failed (%s: %s); it is tried again", tick, type(exc).__name__,
                      exc)
        if releaser.next_tick() <= tick:
            await retry_wait(retry, owns)


async def retry_wait(retry: float, owns: Callable[[], bool] | None) -> None:
    """``retry`` seconds, cut short when a worker that did not own the releases becomes their
    owner (the tick is then tried at once: the journals are read before anything is drawn)."""
    if owns is None or owns():
        await asyncio.sleep(retry)
        return
    deadline = time.monotonic() + retry
    while time.monotonic() < deadline and not owns():
        await asyncio.sleep(min(OWNER_POLL_SECONDS, max(deadline - time.monotonic(), 0.0)))
