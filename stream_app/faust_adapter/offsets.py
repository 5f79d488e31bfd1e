"""Which fetched record the worker's drain loop may hand to its streams (docs/design.md,
"Records are handed over in offset order").

Faust's drain step remembers only the last offset it *read* and treats any jump past it as a
gap to acknowledge. Two things break that on a rebalance or a slow start-up:
- a hand-off abandoned because the flow was suspended still advances the read offset, so the
  record is never handed over unless a later seek happens to bring it back (a worker that
  fetched one record during start-up recovery then sat on it for ever);
- a batch fetched before a seek (``perform_seek`` to the committed offsets during a rebalance)
  is still iterated after it: its records are past the seek target, Faust acknowledges the
  offsets in between as a gap and drops the re-fetched ones as already read (a run of records
  committed without ever reaching the agent).

Here a record is handed over only at the offset the partition expects next. The expected
offset is set by every seek and advanced by every completed hand-off; an abandoned hand-off
leaves it where it was and the partition is sought back to it.

A record past the expected offset is a gap. Kafka logs have them: a compacted topic (every
table changelog) drops superseded keys, each transaction marker takes an offset, deleted
records leave the log start behind. Such a gap is acknowledged and the record handed over when
the partition was not sought since its batch's fetch began (``fetch_stamp``): the client's
position then ran from the last seek through every batch the loop saw, so nothing lies in the
gap. Only after a seek made meanwhile can the record be stale (a batch fetched before the seek);
the partition is then sought back to the expected offset, and the fetch that follows decides.

Records the client consumed that never reached the loop at all: Faust's ``getmany`` throws
away a fetched batch that comes back while the flow is stopped (a rebalance), the rest of a
batch when the generation changes, and the records of a partition paused meanwhile, trusting a
seek to the committed offsets to fetch them again. No such seek moves a partition without a
committed offset (a changelog, an input topic whose offsets were never committed) or one sought
before the batch came back (table recovery seeks its changelogs to 0 first): its position stays
past records nobody saw (``dropped`` says where to fetch such a partition again). Seeks that
Faust runs in the client's thread (``seek_wait``: table recovery; ``seek_to_committed``) land at
a moment the loop cannot see: records of such a partition are skipped while one is in flight
and the partition is fetched again once it is done (``seek_begins``, ``seek_ended``). Skipped,
never kept for later (``seeking``): the gate (alignment.py) drops what it keeps at a seek's end
as if fetched before the seek, yet aiokafka's ``seek_to_committed`` seeks one partition after
another between round trips, so a record that comes back meanwhile may have been fetched from
the new position (issue 44: a survivor's gate kept back up to 693 records fetched from the
committed offsets during its takeover, dropped them at the seek's end, and acknowledged them as
a gap once the client's position was past them). A safety net,
``stalled``: a client fetch position past the expected offset while nothing is handed over; the
loop seeks such a partition back once per (expected offset, position): a position that comes
back to the same place after the fetch again is past a gap at the end of the log (a transaction
marker), not past lost records. (Records wiped from a stream buffer *after* the hand-off are
another matter: stream_app/faust_adapter/flow.py.)
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable


class Verdict(enum.Enum):
    DELIVER = "deliver"  # the expected record (or the first one of an unknown position)
    DROP = "drop"        # before the expected offset: already handed over, or before a seek
    GAP = "gap"          # past it, no seek since the fetch began: acknowledge the gap, deliver
    RESEEK = "reseek"    # past it, sought since the fetch began: seek back, skip the rest
    WAIT = "wait"        # a seek is in flight in the client thread: skip, fetch again after it


class ExpectedOffsets:
    """The next offset each assigned partition may hand over (None: unknown, take any)."""

    def __init__(self, on_moved: Callable[[Hashable], None] | None = None) -> None:
        self._on_moved = on_moved  # told of every seek and revoke (the gate drops what it kept)
        self._next: dict[Hashable, int | None] = {}
        self._serial = 0  # seeks and revocations so far, all partitions
        self._sought_at: dict[Hashable, int] = {}  # _serial at the partition's last seek
        self._behind: dict[Hashable, int] = {}  # expected offset at the last stall check
        self._stall_checked: dict[Hashable, tuple[int, int]] = {}  # (expected, position)
        self._in_flight: dict[Hashable, int | None] = {}  # first record skipped meanwhile
        self._accounted: dict[Hashable, int] = {}  # client position every offset below which
        # was handed over or is a gap the client skipped (a marker): not a stall
        self._fresh: set[Hashable] = set()  # sought, nothing handed over since
        self._confirming: dict[Hashable, tuple[int, int]] = {}  # (expected, first offset)

    def fetch_stamp(self) -> int:
        """Taken before a fetch begins, given to ``judge`` for the records it returns."""
        return self._serial

    def epoch(self, tp: Hashable) -> int:
        """Changes with every seek (or revocation) of the partition: taken before a hand-off,
        given back to ``handed_over``."""
        return self._sought_at.get(tp, 0)

    def expected(self, tp: Hashable) -> int | None:
        return self._next.get(tp)

    def judge(self, tp: Hashable, offset: int, fetch_stamp: int) -> Verdict:
        if tp in self._in_flight:
            if self._in_flight[tp] is None:
                self._in_flight[tp] = offset
            return Verdict.WAIT
        want = self._next.get(tp)
        if want is None or offset == want:
            return Verdict.DELIVER
        if offset < want:
            return Verdict.DROP
        if self._sought_at.get(tp, 0) > fetch_stamp:
            return Verdict.RESEEK
        if tp in self._fresh and self._confirming.get(tp) != (want, offset):
            # the first record after a seek is past its target: fetch from the target once
            # more before acknowledging a gap (a seek the client lost, or one whose position a
            # fetch running in the client's thread overwrote, looks the same as a gap; run L
            # lost 14 records that way or by a path like it); the same first record again is
            # a gap in the log (a marker, a compacted or aborted range)
            self._confirming[tp] = (want, offset)
            return Verdict.RESEEK
        return Verdict.GAP

    def skip_gap(self, tp: Hashable, offset: int) -> int:
        """After a GAP verdict for `offset`: expect it; returns where the gap began."""
        start = self._next.get(tp)
        self._next[tp] = offset
        return offset if start is None else start

    def handed_over(self, tp: Hashable, offset: int, epoch: int | None = None) -> bool:
        """The record at `offset` reached the streams. A seek made while it was being handed
        over (a rebalance, a refetch of what a flow-control wipe dropped) decides where the
        partition goes on, so it is not overridden: False then, and the rest of the
        partition's batch is stale. `epoch` (``epoch(tp)`` when the hand-off began) tells a seek
        to this very offset from none: such a seek fetches the record again because it was
        thrown away after the hand-off, and advancing past it would drop the fresh copy."""
        if epoch is not None and self._sought_at.get(tp, 0) != epoch:
            return False
        if self._next.get(tp) not in (None, offset):
            return False
        self._next[tp] = offset + 1
        self._fresh.discard(tp)
        self._confirming.pop(tp, None)
        return True

    def dropped(self, tp: Hashable, first: int, epoch: int) -> int | None:
        """Records from `first` on were consumed from the Kafka client but thrown away before
        the loop saw them (Faust's ``getmany``). Where to fetch the partition again: the
        expected offset when known (the loop's view of what was handed over), else `first`.
        None when the partition was sought or revoked since the fetch returned (`epoch`, taken
        then): that seek decides."""
        if tp in self._in_flight:
            if self._in_flight[tp] is None:
                self._in_flight[tp] = first
            return None  # seek_ended says where to fetch again
        if self._sought_at.get(tp, 0) != epoch:
            return None
        want = self._next.get(tp)
        return first if want is None else want

    def seek_begins(self, tp: Hashable) -> None:
        """A seek is about to run in the client's thread (Faust's ``seek_wait`` and
        ``seek_to_committed``), at a moment the loop cannot know: a batch returned meanwhile may
        come from before or after it, so its records are skipped until ``seek_ended``."""
        self._in_flight.setdefault(tp, None)

    def seek_ended(self, tp: Hashable, offset: int | None, moved: bool) -> int | None:
        """The seek of ``seek_begins`` is done (`moved`: it set the position to `offset`).
        Where to fetch again when records were skipped meanwhile (the client is past them)."""
        skipped = self._in_flight.pop(tp, None)
        if moved:
            self.sought(tp, offset)
        if skipped is None:
            return None
        want = self._next.get(tp)
        return skipped if want is None else want

    def sought(self, tp: Hashable, offset: int | None) -> None:
        """A seek moved the partition's fetch position (None: to a position not known here)."""
        self._next[tp] = offset if offset is not None and offset >= 0 else None
        self._serial += 1
        self._sought_at[tp] = self._serial
        self._accounted.pop(tp, None)
        self._fresh.add(tp)
        if self._on_moved is not None:
            self._on_moved(tp)

    def seeking(self, tp: Hashable) -> bool:
        """A seek of `tp` runs in the client's thread (``seek_begins`` .. ``seek_ended``): a
        record of it must be judged at once (``WAIT``), never kept for later, since the seek
        may have landed before the record's fetch as well as after it."""
        return tp in self._in_flight

    def sought_since(self, tp: Hashable, fetch_stamp: int) -> bool:
        return self._sought_at.get(tp, 0) > fetch_stamp or tp in self._in_flight

    def account(self, tp: Hashable, fetch_stamp: int, position: int | None) -> None:
        """After a batch: every record the client handed out for `tp` up to `position` (its
        position right after the fetch) was handed over, so offsets between the expected one
        and `position` are gaps the client skipped (transaction markers), not lost records: the
        stall watch leaves (expected, position) alone. None, or a seek since the fetch: not
        accounted."""
        if position is None or self.sought_since(tp, fetch_stamp):
            self._accounted.pop(tp, None)
            return
        self._accounted[tp] = position
        want = self._next.get(tp)
        if want is not None and position > want:
            self._stall_checked[tp] = (want, position)
            self._behind.pop(tp, None)

    def accounted(self, tp: Hashable) -> int | None:
        return self._accounted.get(tp)

    def forget(self, tp: Hashable) -> None:
        self._next.pop(tp, None)
        self._fresh.discard(tp)
        self._confirming.pop(tp, None)
        self._in_flight.pop(tp, None)
        self._behind.pop(tp, None)
        self._stall_checked.pop(tp, None)
        self._accounted.pop(tp, None)
        self._serial += 1
        self._sought_at[tp] = self._serial  # a hand-off or fetch begun before is stale
        if self._on_moved is not None:
            self._on_moved(tp)

    def stalled(self, tp: Hashable, position: int) -> bool:
        """Called every few seconds with the client's fetch position, while no hand-off is in
        progress. True when the client is past the expected offset and nothing was handed over
        since the previous call: records lost between the Kafka client and this loop (the loop
        seeks back). Once per (expected offset, position): if the fetch again leaves the
        client at the same position with nothing handed over, the log has no record there."""
        want = self._next.get(tp)
        if (want is None or position <= want or tp in self._in_flight
                or self._stall_checked.get(tp) == (want, position)):
            self._behind.pop(tp, None)
            return False
        if self._behind.get(tp) == want:
            del self._behind[tp]
            self._stall_checked[tp] = (want, position)
            return True
        self._behind[tp] = want
        return False

    def busy(self) -> None:
        """A hand-off is in progress: its partition's records wait behind it, not lost; the
        stall watch starts afresh."""
        self._behind.clear()
