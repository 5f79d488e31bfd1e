"""The drain loop's gate and end-of-batch steps (docs/design.md, "Per-user order across the
input topics" and "Records are handed over in offset order", the stall watch).

A consumer mixin over alignment.py (the gate's rule) and client_view.py (what the client saw
after each fetch): partitions whose records the gate keeps back are left out of the fetch, and
after each batch what the client's view proves is recorded — a paired partition caught up
(its partner's records may go), a partition accounted up to the client's position (a
transaction marker there is not a lost record).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from faust.types import TP

from stream_app.faust_adapter.alignment import Alignment
from stream_app.faust_adapter.client_view import ClientView, FetchedRecords
from stream_app.faust_adapter.offsets import ExpectedOffsets


class GatedBatches:
    """Mixin for the Faust consumer (consumer.py), which supplies ``_offer``."""

    _gate: Alignment | None = None
    _expected: ExpectedOffsets
    _last_fetch: FetchedRecords | None = None  # set by getmany for the batch being drained
    _previous_views: Mapping[Any, ClientView] = {}

    async def on_partitions_assigned(self, assigned: set[TP], generation_id: int = 0) -> None:
        if self._gate is not None:
            self._gate.assign(assigned)
        await super().on_partitions_assigned(assigned, generation_id)  # type: ignore[misc]

    async def _getmany(self, active_partitions: Any, timeout: float) -> Any:
        """Partitions whose records the gate keeps back are not fetched meanwhile (the client
        keeps their next records buffered)."""
        gate = self._gate
        if gate is not None and gate.held and active_partitions:
            active_partitions = active_partitions - gate.held.keys()
            if not active_partitions:  # an empty set would ask the client for every partition
                await asyncio.sleep(min(timeout, 0.1))
                return {}
        return await super()._getmany(active_partitions, timeout)  # type: ignore[misc]

    def _fetched(self, records: FetchedRecords) -> None:
        """A fetch came back (called by getmany before its records are yielded). A paired
        partition with no record in it, at its end, whose position the last batches accounted
        for (every record below handed over, no seek since) is caught up as of this fetch: its
        partner's records of the same fetch pass inline, without being kept back."""
        gate, expected = self._gate, self._expected
        if gate is None:
            return
        views = records.views
        gate.fetched(views)
        for m in gate.paired_partitions():
            view = views.get(m)
            if (view is None or m in records or view.position is None
                    or expected.sought_since(m, expected.fetch_stamp())):
                continue  # records of m to hand over first, or a seek in flight
            if view.position in (expected.accounted(m), expected.expected(m)):
                gate.caught_up(m, view)

    async def _release(self, r: Any, skip: set[TP]) -> None:
        """Hand over the records of `r` and of its partner that the gate kept back, smaller
        key first, as far as it now admits them."""
        gate: Any = self._gate
        n = 0
        while True:
            for tp in (r, gate.partner.get(r)):
                if tp in skip:  # a seek back (made or in flight) fetches them again
                    gate.held.pop(tp, None)
            released = gate.releasable(r)
            if released is None:
                return
            tp, held = released
            if await self._offer(tp, held.message, held.stamp, skip):  # type: ignore[attr-defined]
                gate.handed_over(tp, held.key)
            n += 1
            if n % 100 == 0:
                await asyncio.sleep(0)

    async def _settle(self, stamp: int, skip: set[TP]) -> None:
        """After a batch: what the client's view after its fetch proves. A paired partition
        whose records were all handed over and whose position reached its end is caught up
        (the gate may release its partner's records); a partition whose records were all
        handed over is accounted up to the client's position (the stall watch leaves markers
        alone)."""
        fetched = self._last_fetch
        if fetched is None:
            return
        views, expected, gate = fetched.views, self._expected, self._gate
        held = gate.held if gate is not None else {}
        if gate is not None:
            for m in gate.paired_partitions():
                view = views.get(m)
                if view is not None and m not in skip and not expected.sought_since(m, stamp):
                    gate.caught_up(m, view)
            for r in list(held):
                await self._release(r, skip)
        previous = self._previous_views
        for tp, view in views.items():
            if tp in skip or tp in held:
                expected.account(tp, stamp, None)
                continue
            before = previous.get(tp)
            if tp in fetched or (before is not None and before.position is not None
                                 and expected.accounted(tp) == before.position):
                expected.account(tp, stamp, view.position)
            else:
                expected.account(tp, stamp, None)
        self._previous_views = views

