"""Per-partition aggregates: what each user adds (``Contribution``), kept incrementally.

Per touched user and batch the aggregate needs the user's new contribution (its share:
``core.learning.user_share`` of its histogram) and the change from the old one. One at a time
that was two thirds of a batch's per-user cost (docs/design.md, "Throughput"): the shares of a
batch are one ``core.learning.user_shares`` call (``contributions``) and each (aggregate, group)
gets the sum of its users' changes in one addition (``PartitionAggregate.replace_all``). The
results are the one-at-a-time results exactly (integers throughout;
tests/stream_app/domain/test_aggregate.py). Nothing here computes a privacy quantity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from pufferfish_core.learning import user_share, user_shares
from stream_app.domain.admitted_sums import AdmittedSums, TreeState
from stream_app.domain.group_totals import GroupTotals
from stream_app.domain.inputs import tuple_new


class Contribution(NamedTuple):
    """What one user adds to its partition's aggregate."""

    units: int  # to the sum (its current value while present, else 0)
    group: str | None
    share: tuple[int, ...] | None  # to its group's histogram sum (None: nothing)
    present: bool = False  # counts in its group's totals (group_totals.py)


Change = tuple[Contribution | None, Contribution]  # (old, new) of one user


class Contributor(Protocol):
    """A user's state as far as its contribution goes (``Draft``)."""

    present: bool
    group: str | None
    value_units: int | None
    counts: list[int]


class StoredUser(Protocol):
    """A user's state as the aggregate reads it when rebuilt (``UserState``)."""

    @property
    def partition(self) -> int: ...

    @property
    def value_ts(self) -> float | None: ...

    @property
    def held(self) -> Sequence[object]: ...

    @property
    def admitted(self) -> Sequence[int]: ...

    def contribution(self) -> Contribution: ...


def has_share(present: bool, group: str | None, counts: Sequence[int]) -> bool:
    """Whether a user adds a share to its group's histogram sum (present, in a group, with at
    least one report)."""
    return present and group is not None and any(counts)


def contribution_of(
    present: bool, group: str | None, value_units: int | None, counts: Sequence[int],
    share: tuple[int, ...] | None = None,
) -> Contribution:
    """`share`: ``user_share(counts)`` when the caller has it already (``contributions``)."""
    units = value_units if present and value_units is not None else 0
    if not has_share(present, group, counts):
        return tuple_new(Contribution, (units, group, None, present))
    return tuple_new(Contribution, (units, group,
                                    share if share is not None else user_share(counts), present))


def contributions(users: Sequence[Contributor]) -> list[Contribution]:
    """Each user's contribution, the shares computed together."""
    need = [i for i, u in enumerate(users) if has_share(u.present, u.group, u.counts)]
    shares = _shares([users[i].counts for i in need])
    given = dict(zip(need, shares, strict=True)) if shares is not None else {}
    return [contribution_of(u.present, u.group, u.value_units, u.counts, given.get(i))
            for i, u in enumerate(users)]


def _shares(rows: list[list[int]]) -> list[tuple[int, ...]] | None:
    """``user_share`` of each row in one ``user_shares`` call; None when that cannot take them
    (counts beyond int64's comfort or of mixed lengths: then one at a time)."""
    if not rows:
        return []
    k = len(rows[0])
    if any(len(r) != k for r in rows):
        return None
    try:
        return [tuple(s) for s in user_shares(np.array(rows, dtype=np.int64)).tolist()]
    except (ValueError, OverflowError):
        return None


@dataclass
class PartitionAggregate(AdmittedSums, GroupTotals):
    """The partial aggregates of one input partition, kept incrementally (O(K) per user)."""

    partition: int
    sum_units: int = 0
    group_units: dict[str, list[int]] = field(default_factory=dict)
    group_totals: dict[str, list[int]] = field(default_factory=dict)  # group_totals.py
    newest_ts: float = 0.0
    # the worker's clock when the newest record applied here was consumed (Partial.consumed_at)
    consumed_at: float = 0.0
    dirty: bool = True
    # users of this partition holding reports until they join (user -> how many): the
    # expiry sweep's index and the worker's held total (stream_app.domain.hold)
    held_users: dict[str, int] = field(default_factory=dict)
    # tree mode (stream_app/domain/admission.py): the window of the clock, the users whose
    # admitted contribution differs from their raw one (user -> (its window, admitted - raw,
    # the window before's final admitted - raw or None)), the sum of those gaps that count in
    # this window, and the final admitted sum of the window before (None: unknown)
    window: int = -1
    gaps: dict[str, tuple[int, int, int | None]] = field(default_factory=dict)
    gap_units: int = 0
    previous_units: int | None = None
    # (window, admitted_units, previous_units, sum_units) as of the last changelog window the
    # broker acknowledged: what a tree-mode partial shows while writes are pending
    durable: TreeState | None = None

    def note_held(self, user_id: str, count: int) -> None:
        if count:
            self.held_users[user_id] = count
        else:
            self.held_users.pop(user_id, None)

    @property
    def held_count(self) -> int:
        return sum(self.held_users.values())

    def apply(self, old: StoredUser | None, new: StoredUser) -> None:
        """Replace one user's contribution."""
        self.replace(old.contribution() if old is not None else None, new.contribution())

    def replace(self, old: Contribution | None, new: Contribution) -> None:
        """Replace one user's contribution ``old`` (None: a new user) by ``new``."""
        self.sum_units += new.units - (old.units if old is not None else 0)
        self.move_member(old, new)
        self.dirty = True
        if old is not None and old.share is not None and new.share is not None \
                and old.group == new.group:  # the common case: one pass over the bins
            assert new.group is not None
            bins = self.group_units.setdefault(new.group, [0] * len(new.share))
            if len(bins) == len(old.share) == len(new.share):
                bins[:] = [b - o + n for b, o, n in zip(bins, old.share, new.share, strict=True)]
                return
        for c, sign in ((old, -1), (new, 1)):
            if c is None or c.share is None:
                continue
            assert c.group is not None
            bins = self.group_units.setdefault(c.group, [0] * len(c.share))
            for j, units in enumerate(c.share):
                bins[j] += sign * units

    def replace_all(self, changes: Sequence[Change]) -> None:
        """``replace(old, new)`` for every change, in order: the changes that keep a user's
        group (the common case) are summed per group and added once. Shares of more than one
        length (a domain changed under old states) are replaced one at a time."""
        lengths = {len(c.share) for change in changes for c in change
                   if c is not None and c.share is not None}
        lengths.update(len(bins) for bins in self.group_units.values())
        if len(lengths) > 1:
            for old, new in changes:
                self.replace(old, new)
            return
        same: dict[str, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
        for old, new in changes:
            if old is not None and old.share is not None and new.share is not None \
                    and old.group == new.group:
                self.sum_units += new.units - old.units
                self.move_member(old, new)
                same.setdefault(new.group, []).append((old.share, new.share))  # type: ignore[arg-type]
            else:
                self.replace(old, new)
        for group, pairs in same.items():
            bins = self.group_units.setdefault(group, [0] * len(pairs[0][0]))
            # column sums of the new and the old shares (one length: checked above); in
            # Python ints, 2.3x faster here than two numpy arrays of a few hundred rows
            news = map(sum, zip(*[n for _, n in pairs], strict=True))
            olds = map(sum, zip(*[o for o, _ in pairs], strict=True))
            bins[:] = [b + n - o for b, n, o in zip(bins, news, olds, strict=True)]
        self.dirty = True

    def add_all(self, added: Sequence[Contribution]) -> None:
        """``replace(None, c)`` for every c (users new to the aggregate: a rebuild), the shares
        of each group summed column by column and added once."""
        shares: dict[str, list[tuple[int, ...]]] = {}
        for c in added:
            self.sum_units += c.units
            self.move_member(None, c)
            if c.share is not None:
                assert c.group is not None
                shares.setdefault(c.group, []).append(c.share)
        for group, rows in shares.items():
            if len({len(r) for r in rows}) > 1:  # shares of two domains: one at a time
                for r in rows:
                    self.replace(None, Contribution(0, group, r))
                continue
            bins = self.group_units.setdefault(group, [0] * len(rows[0]))
            if len(bins) != len(rows[0]):
                for r in rows:
                    self.replace(None, Contribution(0, group, r))
                continue
            bins[:] = [b + s for b, s in zip(bins, map(sum, zip(*rows, strict=True)),
                                             strict=True)]
        self.dirty = True

    def note_event(self, ts: float | None, consumed_at: float = 0.0) -> None:
        """A record was applied: ``ts`` its event time, ``consumed_at`` the worker's clock when
        its batch was consumed."""
        if ts is not None and ts > self.newest_ts:
            self.newest_ts = ts
        if consumed_at > self.consumed_at:
            self.consumed_at = consumed_at
        self.dirty = True

    @classmethod
    def rebuild(cls, partition: int, users: Sequence[tuple[str, StoredUser]], window: int = -1
                ) -> PartitionAggregate:
        """From the recovered table (once per assignment, not per event); ``window``: the
        clock's (tree mode)."""
        agg = cls(partition=partition, window=window)
        for user_id, st in users:
            if st.partition == partition:
                agg.apply(None, st)
                agg.note_held(user_id, len(st.held))
                if st.admitted:
                    agg.note_admitted(user_id, st.admitted, st.contribution().units)
                if st.value_ts is not None and st.value_ts > agg.newest_ts:
                    agg.newest_ts = st.value_ts
        agg.dirty = True
        return agg

    def snapshot(self) -> tuple[int, dict[str, list[int]], float, float]:
        """(sum_units, group_units, newest_ts, consumed_at) for a Partial; the aggregate is
        clean after it."""
        self.dirty = False
        return self.sum_units, self.group_units, self.newest_ts, self.consumed_at
