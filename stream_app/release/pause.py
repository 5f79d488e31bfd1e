"""The pause fence: notice a stalled event loop and hold the release agent for a while.

A heartbeat task notices when the loop was stalled for more than half the session timeout
(SIGSTOP, a frozen VM, a long GC). The consumer group may have moved on without us, so ticks
are held for a few heartbeat intervals (time to learn of the rebalance) and ``on_pause`` asks
for the journals to be re-read before the next tick.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from stream_app.settings import Settings

log = logging.getLogger(__name__)

BEAT_SECONDS = 0.25


class PauseGuard:
    def __init__(self, settings: Settings, on_pause: Callable[[], None]) -> None:
        self.settings = settings
        self._on_pause = on_pause
        self.generation = 0  # bumped by every invalidation (the owner's view may be stale)
        self._task: asyncio.Task[None] | None = None
        self._last_beat = time.monotonic()
        self._hold_until = 0.0

    @property
    def limit(self) -> float:
        return self.settings.broker_session_timeout / 2

    def ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._last_beat = time.monotonic()
            self._task = asyncio.get_running_loop().create_task(self._beat())
        self.check()

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def hold_for(self, seconds: float) -> None:
        """Hold ticks for ``seconds`` from now."""
        self._hold_until = max(self._hold_until, time.monotonic() + seconds)

    def step_down(self) -> None:
        """Another worker claimed the releaser's transactional id after this one: it owns the
        releases now. Nothing this tick sent is ever committed (the claim aborted it); ticks are
        held a session timeout (the group moves the release partition meanwhile), then the
        journals are read again after a claim of our own, if this worker still owns them."""
        hold = self.settings.broker_session_timeout
        self.hold_for(hold)
        self._on_pause()
        log.warning("release owner fenced: another worker claimed transactional id %s (or "
                    "the tick's transaction outlived its timeout), so nothing of this tick is "
                    "published (its transaction is aborted); ticks held %.1f s, then the "
                    "journals are re-read", self.settings.transactional_id, hold)

    def holding(self) -> bool:
        self.check()
        return time.monotonic() < self._hold_until

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_SECONDS)
            self.check()

    def check(self) -> None:
        now = time.monotonic()
        stalled = now - self._last_beat
        self._last_beat = now
        if stalled > self.limit:
            s = self.settings
            hold = 3 * s.broker_heartbeat_interval + s.journal_quiet_seconds
            self._hold_until = max(self._hold_until, now + hold)
            self._on_pause()
            log.warning("event loop stalled %.1f s (over half the session timeout): ticks "
                        "held %.1f s, then the journals are re-read", stalled, hold)
