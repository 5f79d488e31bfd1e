"""The writes of the input batches applied since the last flush, sent together.

A user who reports in several batches of one window gets one changelog record: its last value
(a state is written whole, so the last value carries every earlier change). Kafka Streams'
record cache does the same between commits. The window's events stay held back until the
broker acknowledged its writes, so their offsets are committed only then (docs/design.md,
"Delivery semantics"); the stored states record the input offsets they reflect, so a crash that
loses a window replays its input exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from stream_app.domain.batch import DeadLetters
from stream_app.faust_adapter.user_table import Write


class WriteWindow:
    """Dead letters in order, the newest value per (user, partition), the held-back events."""

    __slots__ = ("letters", "values", "events", "opened")

    def __init__(self) -> None:
        self.letters: DeadLetters = []
        self.values: dict[tuple[str, int], bytes] = {}
        self.events: list[Any] = []
        self.opened: float | None = None  # monotonic time of its first batch

    def add(self, letters: DeadLetters, writes: Iterable[Write], events: Sequence[Any],
            now: float) -> None:
        if self.opened is None:
            self.opened = now
        self.letters.extend(letters)
        values = self.values
        for user_id, value, partition in writes:
            values[(user_id, partition)] = value
        self.events.extend(events)

    def due(self, now: float, flush_seconds: float) -> bool:
        """Open for flush_seconds (0: every batch is its own window)."""
        return self.opened is not None and now - self.opened >= flush_seconds

    def __bool__(self) -> bool:
        return self.opened is not None
