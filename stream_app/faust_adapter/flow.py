"""Faust's flow control, except that the records it throws away are fetched again
(docs/design.md, "Records are handed over in offset order").

Faust's ``app.flow_control.resume()`` empties every stream buffer, on the assumption that a
seek to the committed offsets comes after and fetches those records again. At the end of a
recovery Faust resumes twice (``Recovery._resume_streams``, then ``on_recovery_completed``,
which seeks *before* resuming): a record fetched between the two is handed to the agent's
buffer and then wiped, with the fetch position already past it. A restarted worker sat on such
a report for ever (fetch position 2, committed offset 1, the record handed over and never seen
by the agent). Here ``clear`` reports the first offset it dropped per partition, and the
consumer fetches each partition again from there (stream_app/faust_adapter/consumer.py ``refetch``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from mode.utils.queues import FlowControlEvent


def first_offsets(items: Any) -> dict[Hashable, int]:
    """The lowest offset per partition among buffered stream events (items without a message
    are skipped)."""
    first: dict[Hashable, int] = {}
    for item in items:
        message = getattr(item, "message", None)
        tp, offset = getattr(message, "tp", None), getattr(message, "offset", None)
        if tp is not None and isinstance(offset, int):
            first[tp] = min(offset, first.get(tp, offset))
    return first


class RefetchingFlowControl(FlowControlEvent):
    def __init__(self, *, on_dropped: Callable[[dict[Hashable, int]], None],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_dropped = on_dropped

    def clear(self) -> None:
        dropped: dict[Hashable, int] = {}
        for queue in list(self._queues):
            for tp, offset in first_offsets(list(queue._queue)).items():  # type: ignore[attr-defined]
                dropped[tp] = min(offset, dropped.get(tp, offset))
            queue.clear()
        if dropped:
            self._on_dropped(dropped)
