"""The worker consumer's fetch: Faust's ``Consumer.getmany`` minus its silent drops
(docs/design.md, "Records are handed over in offset order"; decisions in faust_offsets.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from faust.transport.consumer import ensure_TP
from faust.types import TP, Message


class RefetchingGetmany:
    """Mixin for the Faust consumer (stream_app/faust_adapter/consumer.py), which supplies
    ``_expected``, ``_fetched``, ``_last_fetch`` and ``_seek_back``."""

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        """Faust's ``getmany``, except that records it throws away are fetched again.

        Faust drops a batch that comes back while the flow is stopped, the rest of a batch once
        the generation changes, and the records of a partition no longer active (paused
        meanwhile); the client's fetch position is past them all the same, and Faust counts on
        its seek to the committed offsets to bring them back. That seek leaves alone a
        partition without a committed offset — every changelog, an input topic not committed
        yet — and comes too early for a partition sought before the batch came back: table
        recovery seeks its changelogs to 0, a fetch begun before returns records 0..end and is
        dropped, and recovery waits for ever for records the client has already consumed (a
        worker rejoining after a broker restart). Here each such partition is sought back
        (``ExpectedOffsets.dropped``: unless a seek or revoke since the fetch decides)."""
        consumer: Any = self
        records, active_partitions = await consumer._wait_next_records(timeout)
        if records is None or consumer.should_stop:
            return
        app, expected = consumer.app, consumer._expected
        views = getattr(records, "views", None)  # client_view.FetchedRecords, from our thread
        if views is not None:
            consumer._last_fetch = records  # for the drain loop's end of batch
            consumer._fetched(records)
        generation_id = app.consumer_generation_id
        epochs = {tp: expected.epoch(tp) for tp in records}  # no await since the fetch
        yielded: dict[TP, int] = {}
        skipped: dict[TP, int] = {}  # first record of a partition no longer active
        if consumer.flow_active:
            to_message = consumer._to_message
            for tp, record in consumer.scheduler.iterate(records):
                if not consumer.flow_active or app.consumer_generation_id != generation_id:
                    break
                if (active_partitions is None or tp in active_partitions
                        or tp in consumer._buffered_partitions):
                    app.monitor.track_tp_end_offset(tp, consumer.highwater(tp))
                    yielded[tp] = yielded.get(tp, 0) + 1
                    yield tp, to_message(tp, record)
                elif tp not in skipped:
                    skipped[tp] = record.offset
            self._fetch_dropped_again(records, yielded, skipped, epochs)
        else:
            self._fetch_dropped_again(records, yielded, skipped, epochs)
            try:  # as Faust: back to the committed offsets (where there are some)
                await consumer.perform_seek()
            except Exception as exc:  # noqa: BLE001 - as in Faust
                consumer.log.warning("exception performing seek when flow not active %r", exc)

    def _fetch_dropped_again(self, records: Mapping[TP, Any], yielded: Mapping[TP, int],
                             skipped: Mapping[TP, int], epochs: Mapping[TP, int]) -> None:
        consumer: Any = self
        for tp, batch in records.items():
            first = skipped.get(tp)
            if first is None:
                n = yielded.get(tp, 0)
                if n >= len(batch):
                    continue  # all of it reached the drain loop
                first = batch[n].offset
            target = consumer._expected.dropped(tp, first, epochs[tp])
            if target is not None:
                consumer._seek_back(ensure_TP(tp), target, "Faust's getmany dropped records "
                                    f"from offset {first} (flow stopped, new generation or "
                                    "paused)")
