"""Per-user order across the two co-partitioned input topics (docs/design.md, "Per-user order
across the input topics": the gate).

With two input topics, partition p of ``topic_reports`` (R) and partition p of
``topic_membership`` (M) hold the same users (murmur2 of ``user_id``). The drain loop merges the
pair by Kafka timestamp, as Kafka Streams merges a task's partitions. Each record gets a key:
its timestamp, plus half a millisecond for a report, so that at equal timestamps the membership
record comes first (a join and its report of the same millisecond stay joined-first; a leave
and a report of the same millisecond go leave-first). A record of one side is handed over when
its partner partition

- handed over a record with a later key (when timestamps of a partition rise with its offsets
  — LogAppendTime, or producers' clocks in sync — every record of the partner up to this one's
  time is then handed over), or
- keeps back a record with a later key (both heads known: the smaller one goes; no deadlock), or
- keeps nothing back and was caught up (every record below its end offset handed over) as of a
  fetch response no older than the one that brought this record (the client's per-partition
  poll time, one clock): a quiet partner never blocks.

A record the gate refuses is kept here, in order, with the rest of its partition's records;
the partition is left out of the fetch (the client keeps its next records buffered and stops
fetching it) until its partner moves on. Both sides are held the same way. A seek or revoke of
a partition makes its kept records stale: they are dropped, and the client's position (set by
that seek) fetches them again.

Pure bookkeeping, no I/O: ``tests/stream_app/faust_adapter/test_alignment.py``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, NamedTuple

from stream_app.faust_adapter.client_view import ClientView

NEVER = float("-inf")
UNKNOWN_MS = 2**62  # a poll time no caught-up evidence reaches
REPORT_AFTER_TIE = 0.0005  # s, added to a report's key: membership first at equal timestamps


class Held(NamedTuple):
    message: Any  # Faust's ConsumerMessage
    stamp: int  # ExpectedOffsets.fetch_stamp() of its fetch
    poll_ms: int  # its partition's poll time when it was fetched
    key: float  # its merge key (``Alignment.key``)


class Alignment:
    """The gate of the drain loop (stream_app/faust_adapter/consumer.py) for one worker."""

    def __init__(self, reports_topic: str, membership_topic: str) -> None:
        self.reports_topic, self.membership_topic = reports_topic, membership_topic
        self.partner: dict[Hashable, Hashable] = {}  # either side -> the other side
        self._newest: dict[Hashable, float] = {}  # newest key handed over
        self._caught_up_ms: dict[Hashable, int] = {}  # poll time it was caught up as of
        self.held: dict[Hashable, deque[Held]] = {}  # records kept back, in offset order
        self._poll_ms: dict[Hashable, int] = {}  # poll time of the batch being drained

    # --- assignment -------------------------------------------------------------------------
    def assign(self, tps: Iterable[Any]) -> None:
        """The partitions assigned now: pair each R partition with its M partition (a partition
        whose partner is elsewhere is not gated)."""
        assigned = set(tps)
        self.partner.clear()
        for tp in assigned:
            if tp.topic == self.reports_topic:
                m = tp._replace(topic=self.membership_topic)
                if m in assigned:
                    self.partner[tp], self.partner[m] = m, tp
        # records kept back for a partition no longer paired are released by the next batch
        # (``releasable``: nothing to wait for); a revoked one was dropped by ``forget``

    def forget(self, tp: Hashable) -> None:
        """A seek or revoke of `tp`: what it handed over or kept back no longer counts."""
        self.held.pop(tp, None)
        self._newest.pop(tp, None)
        self._caught_up_ms.pop(tp, None)

    # --- the order rule ------------------------------------------------------------------------
    def fetched(self, views: Mapping[Any, ClientView]) -> None:
        """A fetch came back: the poll time of each paired partition for its records."""
        for tp in self.partner:
            view = views.get(tp)
            self._poll_ms[tp] = UNKNOWN_MS if view is None or view.poll_ms is None else view.poll_ms

    def key(self, tp: Any, timestamp: float | None) -> float:
        key = timestamp if timestamp is not None else 0.0  # none: as early as can be
        return key + REPORT_AFTER_TIE if tp.topic == self.reports_topic else key

    def admits(self, tp: Hashable, other: Hashable, key: float) -> bool:
        """May the record of `tp` with this key be handed over now? (hot path)"""
        if tp in self.held:
            return False  # records of tp wait behind an earlier one
        return self._partner_allows(other, key, self._poll_ms.get(tp, UNKNOWN_MS))

    def _partner_allows(self, other: Hashable, key: float, poll_ms: int) -> bool:
        if key < self._newest.get(other, NEVER):
            return True
        queue = self.held.get(other)
        if queue:
            return key < queue[0].key
        return self._caught_up_ms.get(other, -1) >= poll_ms

    def hold(self, tp: Hashable, message: Any, stamp: int, key: float) -> None:
        queue = self.held.get(tp)
        if queue is None:
            queue = self.held[tp] = deque()
        queue.append(Held(message, stamp, self._poll_ms.get(tp, UNKNOWN_MS), key))

    def handed_over(self, tp: Hashable, key: float) -> None:
        if key > self._newest.get(tp, NEVER):
            self._newest[tp] = key

    def caught_up(self, tp: Hashable, view: ClientView) -> bool:
        """After a batch whose records of `tp` were all handed over, with no seek of it since
        its fetch began: caught up as of the fetch when its position reached its end and it
        keeps nothing back."""
        if tp in self.held:
            return False
        if view.position is None or view.end is None or view.end < 0 or view.poll_ms is None:
            return False
        if view.position < view.end:
            return False
        if view.poll_ms > self._caught_up_ms.get(tp, -1):
            self._caught_up_ms[tp] = view.poll_ms
        return True

    def releasable(self, tp: Hashable) -> tuple[Hashable, Held] | None:
        """The next kept-back record of `tp` or of its partner, smaller key first, when the
        gate now admits it (removed), else None."""
        queue = self.held.get(tp)
        other = self.partner.get(tp)
        if other is not None:
            theirs = self.held.get(other)
            if theirs and (not queue or theirs[0].key < queue[0].key):
                tp, queue, other = other, theirs, tp  # the smaller head first
        if not queue:
            self.held.pop(tp, None)
            return None
        first = queue[0]
        if other is not None and not self._partner_allows(other, first.key, first.poll_ms):
            return None
        queue.popleft()
        if not queue:
            del self.held[tp]
        return tp, first

    def paired_partitions(self) -> Iterable[Hashable]:
        return self.partner.keys()
