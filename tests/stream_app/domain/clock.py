"""The ingest's clock for tests: arrival times (a held report keeps its arrival time) move only
when a test moves ``FixedClock.now``, never with the machine's load; the CPU clock is the real
one (``pufferfish_input_cpu_seconds_total``)."""

from __future__ import annotations

import time


class FixedClock:
    """Stands in for the ``time`` module of stream_app.domain.ingest (monkeypatched)."""

    now = 1_000_000.0
    thread_time = staticmethod(time.thread_time)

    @classmethod
    def time(cls) -> float:
        return float(cls.now)
