"""A batch's users' contributions to their partition aggregates, computed for all at once.

Per touched user and batch the aggregate needs the user's new ``Contribution`` (its share:
``core.learning.user_share`` of its histogram) and the change from the old one. One at a time
that was two thirds of a batch's per-user cost (docs/design.md, "Throughput"); here the shares
of a batch are one ``core.learning.user_shares`` call and each (aggregate, group) gets the sum
of its users' changes in one addition. The results are the one-at-a-time results exactly
(integers throughout; tests/stream_app/domain/test_contributions.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.learning import user_shares
from stream_app.domain.state import Contribution, Draft, PartitionAggregate

Change = tuple[Contribution | None, Contribution]  # (old, new) of one user


def contributions(drafts: Sequence[Draft]) -> list[Contribution]:
    """``[d.contribution() for d in drafts]``, the shares computed together."""
    need = [i for i, d in enumerate(drafts) if d.has_share()]
    shares = _shares([drafts[i].counts for i in need])
    if shares is None:  # counts beyond int64's comfort or of mixed lengths: one at a time
        return [d.contribution() for d in drafts]
    given = dict(zip(need, shares, strict=True))
    return [d.contribution(given.get(i)) for i, d in enumerate(drafts)]


def _shares(rows: list[list[int]]) -> list[tuple[int, ...]] | None:
    """``user_share`` of each row in one ``user_shares`` call; None when that cannot take them."""
    if not rows:
        return []
    k = len(rows[0])
    if any(len(r) != k for r in rows):
        return None
    try:
        return [tuple(s) for s in user_shares(np.array(rows, dtype=np.int64)).tolist()]
    except (ValueError, OverflowError):
        return None


def replace_all(agg: PartitionAggregate, changes: Sequence[Change]) -> None:
    """``agg.replace(old, new)`` for every change, in order: the changes that keep a user's
    group (the common case) are summed per group and added once. Shares of more than one
    length (a domain changed under old states) are replaced one at a time, as before."""
    lengths = {len(c.share) for change in changes for c in change
               if c is not None and c.share is not None}
    lengths.update(len(bins) for bins in agg.group_units.values())
    if len(lengths) > 1:
        for old, new in changes:
            agg.replace(old, new)
        return
    same: dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
    for old, new in changes:
        if old is not None and old.share is not None and new.share is not None \
                and old.group == new.group:
            agg.sum_units += new.units - old.units
            same.setdefault(new.group, []).append((old.share, new.share))  # type: ignore[arg-type]
        else:
            agg.replace(old, new)
    for group, pairs in same.items():
        bins = agg.group_units.setdefault(group, [0] * len(pairs[0][0]))
        delta = (np.array([n for _, n in pairs], dtype=np.int64).sum(axis=0)
                 - np.array([o for o, _ in pairs], dtype=np.int64).sum(axis=0)).tolist()
        bins[:] = [b + d for b, d in zip(bins, delta, strict=True)]
    agg.dirty = True
