"""Offset gaps recorded at a plain record's cost (docs/design.md, "Records are handed over in
offset order", offset gaps).

Faust's ``Consumer._add_gap`` adds each gap (a transaction marker, a compacted run) to the
partition's interval tree and then calls ``merge_overlaps()`` on the whole tree, which is
cleared only as commits pass it: over a backlog of 1,000 transactions that is quadratic (43.5 of
72 s in ``merge_overlaps``, issue 34). Here a gap is merged only with the intervals it overlaps,
found through the tree (logarithmic), so the tree holds the same offsets as Faust's, in
intervals that never overlap — what Faust's ``_new_offset`` reads when it commits acked offsets
plus gaps.
"""

from __future__ import annotations

from typing import Any


class CheapGaps:
    """Consumer mixin: Faust's ``_add_gap`` without the whole-tree merge."""

    _gap: Any  # Faust's per-partition IntervalTree
    _committed_offset: Any

    async def _add_gap(self, tp: Any, offset_from: int, offset_to: int) -> None:
        add_gap(self._gap[tp], self._committed_offset[tp], offset_from, offset_to)


def add_gap(tree: Any, committed: int | None, offset_from: int, offset_to: int) -> None:
    """Faust's rule (``Consumer._add_gap``: from ``max(offset_from, committed + 1)`` to
    `offset_to` inclusive), merged with the intervals it overlaps."""
    if committed is not None:
        offset_from = max(offset_from, committed + 1)
    if offset_from > offset_to:
        return
    begin, end = offset_from, offset_to + 1  # intervaltree intervals exclude the end
    overlapping = tree.overlap(begin, end)
    if overlapping:
        for interval in overlapping:
            begin, end = min(begin, interval.begin), max(end, interval.end)
            tree.remove(interval)
    tree.addi(begin, end)
