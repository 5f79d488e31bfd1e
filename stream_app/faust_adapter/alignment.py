"""Per-user order across the two co-partitioned input topics (docs/design.md, "Per-user order
across the input topics": the gate).

With two input topics, partition p of ``topic_reports`` (R) and partition p of
``topic_membership`` (M) hold the same users (murmur2 of ``user_id``). The drain loop hands a
record of R over only when M has no join left that was acknowledged before that report was
produced:

- M handed over a record with a Kafka timestamp *after* the report's (when timestamps of a
  partition rise with its offsets — LogAppendTime, or producers' clocks in sync — every M
  record up to the report's time is then handed over), or
- M was caught up (every record below its end offset handed over) as of a fetch response no
  older than the one that brought the report (the client's per-partition poll time, one clock).

A report the gate refuses is kept here, in order, with the rest of its partition's records;
the partition is left out of the fetch (the client keeps its next records buffered and stops
fetching it) until M moves on. A seek or revoke of R makes the kept records stale: they are
dropped, and the client's position (set by that seek) fetches them again.

Pure bookkeeping, no I/O: ``tests/stream_app/faust_adapter/test_alignment.py``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, NamedTuple

from stream_app.faust_adapter.client_view import ClientView

NEVER = float("-inf")
UNKNOWN_MS = 2**62  # a poll time no caught-up evidence reaches


class Held(NamedTuple):
    message: Any  # Faust's ConsumerMessage
    stamp: int  # ExpectedOffsets.fetch_stamp() of its fetch
    poll_ms: int  # its partition's poll time when it was fetched


class Alignment:
    """The gate of the drain loop (stream_app/faust_adapter/consumer.py) for one worker."""

    def __init__(self, reports_topic: str, membership_topic: str) -> None:
        self.reports_topic, self.membership_topic = reports_topic, membership_topic
        self.partner: dict[Hashable, Hashable] = {}  # R partition -> its M partition
        self._reports_of: dict[Hashable, Hashable] = {}  # M partition -> its R partition
        self._newest: dict[Hashable, float] = {}  # M: newest timestamp handed over (s)
        self._caught_up_ms: dict[Hashable, int] = {}  # M: poll time it was caught up as of
        self.held: dict[Hashable, deque[Held]] = {}  # R: records kept back, in offset order
        self._poll_ms: dict[Hashable, int] = {}  # R: poll time of the batch being drained

    # --- assignment -------------------------------------------------------------------------
    def assign(self, tps: Iterable[Any]) -> None:
        """The partitions assigned now: pair each R partition with its M partition (a report
        partition whose membership partition is elsewhere is not gated)."""
        assigned = set(tps)
        self.partner.clear()
        self._reports_of.clear()
        for tp in assigned:
            if tp.topic == self.reports_topic:
                m = tp._replace(topic=self.membership_topic)
                if m in assigned:
                    self.partner[tp], self._reports_of[m] = m, tp
        # records kept back for a partition no longer paired are released by the next batch
        # (``releasable``: nothing to wait for); a revoked one was dropped by ``forget``

    def forget(self, tp: Hashable) -> None:
        """A seek or revoke of `tp`: what it handed over or kept back no longer counts."""
        self.held.pop(tp, None)
        self._newest.pop(tp, None)
        self._caught_up_ms.pop(tp, None)

    # --- the order rule ------------------------------------------------------------------------
    def fetched(self, views: Mapping[Any, ClientView]) -> None:
        """A fetch came back: the poll time of each R partition for its records."""
        for r in self.partner:
            view = views.get(r)
            self._poll_ms[r] = UNKNOWN_MS if view is None or view.poll_ms is None else view.poll_ms

    def admits(self, r: Hashable, m: Hashable, timestamp: float | None) -> bool:
        """May the R record with this Kafka timestamp (s) be handed over now? (hot path)"""
        if r in self.held:
            return False  # records of r wait behind an earlier one
        if timestamp is not None and timestamp < self._newest.get(m, NEVER):
            return True
        return self._caught_up_ms.get(m, -1) >= self._poll_ms.get(r, UNKNOWN_MS)

    def hold(self, r: Hashable, message: Any, stamp: int) -> None:
        queue = self.held.get(r)
        if queue is None:
            queue = self.held[r] = deque()
        queue.append(Held(message, stamp, self._poll_ms.get(r, UNKNOWN_MS)))

    def membership_handed_over(self, m: Hashable, timestamp: float | None) -> Hashable | None:
        """An M record reached the streams. Returns its R partition when records of it are kept
        back (the loop then calls ``releasable``)."""
        r = self._reports_of.get(m)
        if r is None:
            return None
        if timestamp is not None and timestamp > self._newest.get(m, NEVER):
            self._newest[m] = timestamp
        return r if r in self.held else None

    def caught_up(self, m: Hashable, view: ClientView) -> bool:
        """After a batch whose M records were all handed over, with no seek of M since its
        fetch began: M is caught up as of the fetch when its position reached its end."""
        if view.position is None or view.end is None or view.end < 0 or view.poll_ms is None:
            return False
        if view.position < view.end:
            return False
        if view.poll_ms > self._caught_up_ms.get(m, -1):
            self._caught_up_ms[m] = view.poll_ms
        return True

    def releasable(self, r: Hashable) -> Held | None:
        """The first kept-back record of `r` when the gate now admits it (removed), else None."""
        queue = self.held.get(r)
        if not queue:
            self.held.pop(r, None)
            return None
        first = queue[0]
        m = self.partner.get(r)
        if m is None:
            ok = True  # no longer gated (its membership partition went elsewhere)
        else:
            ts = first.message.timestamp
            ok = ((ts is not None and ts < self._newest.get(m, NEVER))
                  or self._caught_up_ms.get(m, -1) >= first.poll_ms)
        if not ok:
            return None
        queue.popleft()
        if not queue:
            del self.held[r]
        return first

    def membership_partitions(self) -> Iterable[Hashable]:
        return self._reports_of.keys()
