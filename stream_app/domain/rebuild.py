"""Partition aggregates rebuilt from stored user states, a slice at a time (after a restart or a
rebalance: docs/design.md, "Aggregates after a restart").

``AggregateBuilder.add`` takes one slice of ``(user_id, stored value)`` rows and adds each
user to the aggregate of its partition; the caller decides how big a slice is and yields to its
event loop between slices, so a rebuild of a million users does not stop the worker's timers.
The rows are decoded to what the aggregate needs (no ``Draft``, no report-id digests) and the
shares of a slice are one ``contributions`` call. The result equals ``PartitionAggregate.rebuild``
and the aggregate kept incrementally (tests/stream_app/domain/test_rebuild.py). Nothing here
computes a privacy quantity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from stream_app.domain.aggregate import Contribution, PartitionAggregate, contributions
from stream_app.domain.draft import Stored, decode_state


class _Row:
    """A stored user as ``contributions`` reads it (a ``Contributor``)."""

    __slots__ = ("present", "group", "value_units", "counts")

    def __init__(self, present: bool, group: str | None, value_units: int | None,
                 counts: list[int]) -> None:
        self.present, self.group, self.value_units, self.counts = (
            present, group, value_units, counts)


class AggregateBuilder:
    """Aggregates of `partitions` under construction; users of other partitions are skipped."""

    def __init__(self, partitions: Iterable[int]) -> None:
        self.aggregates = {p: PartitionAggregate(partition=p) for p in partitions}

    def add(self, rows: Sequence[tuple[str, Stored]]) -> None:
        """Add one slice of stored users."""
        wanted = self.aggregates
        docs: list[tuple[str, int, dict[str, Any]]] = []
        for user_id, raw in rows:
            if raw is None:
                continue
            doc = decode_state(raw)
            partition = int(doc["partition"])
            if partition in wanted:
                docs.append((user_id, partition, doc))
        found = contributions([
            _Row(bool(d["present"]), d.get("group"), d.get("value_units"),
                 list(map(int, d.get("counts", ())))) for _, _, d in docs])
        by_partition: dict[int, list[Contribution]] = {}
        for (user_id, partition, doc), c in zip(docs, found, strict=True):
            by_partition.setdefault(partition, []).append(c)
            agg = wanted[partition]
            held = doc.get("held")
            if held:
                agg.note_held(user_id, len(held))
            admitted = doc.get("a")  # tree mode (stream_app/domain/admission.py)
            if admitted:
                agg.note_admitted(user_id, admitted, c.units)
            ts = doc.get("value_ts")
            if ts is not None and ts > agg.newest_ts:
                agg.newest_ts = ts
        for partition, added in by_partition.items():
            wanted[partition].add_all(added)

    def built(self) -> dict[int, PartitionAggregate]:
        for agg in self.aggregates.values():
            agg.dirty = True
        return self.aggregates
