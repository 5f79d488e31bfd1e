"""One user's state as a value (``UserState``, frozen) and the event rules applied to it.

The input path works on ``Draft`` (mutable, one per touched user and batch); ``UserState``
is the same state read-only, encoded and decoded by ``Draft`` (one stored form). Fields: see
stream_app/domain/draft.py; ``recent_ids`` are the 64-bit digests (``report_digest``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stream_app.domain.aggregate import Contribution, contribution_of
from stream_app.domain.digests import pack_ids, unpack_ids
from stream_app.domain.draft import Draft, Stored
from stream_app.domain.inputs import MembershipIn, ReportIn
from stream_app.domain.models import Membership, Report
from stream_app.domain.rules import EventRules


@dataclass(frozen=True)
class UserState:
    partition: int
    present: bool = False
    group: str | None = None
    value_units: int | None = None
    value_ts: float | None = None
    counts: tuple[int, ...] = ()
    recent_ids: tuple[int, ...] = ()
    left_ts: float | None = None
    held: tuple[tuple[Any, ...], ...] = ()
    offsets: tuple[int, ...] = ()  # (partition, reports offset, membership offset); -1: none
    admitted: tuple[int, ...] = ()  # tree mode: (window, admitted units, changes admitted)

    @property
    def contribution_units(self) -> int:
        """What the user adds to X = sum over present users of their current value."""
        return self.value_units if self.present and self.value_units is not None else 0

    def contribution(self) -> Contribution:
        return contribution_of(self.present, self.group, self.value_units, self.counts)

    def draft(self) -> Draft:
        """A working copy."""
        d = Draft(self.partition)
        d.exists, d.present, d.group = True, self.present, self.group
        d.value_units, d.value_ts = self.value_units, self.value_ts
        d.counts = list(self.counts)
        d.ids = bytearray(pack_ids(self.recent_ids))
        d.left_ts = self.left_ts
        d.held = [list(h) for h in self.held]
        d.offsets = list(self.offsets) or None
        d.admitted = list(self.admitted) or None
        return d

    @classmethod
    def of(cls, draft: Draft) -> UserState:
        assert draft.exists, "a draft without an accepted record has no state"
        return cls(
            partition=draft.partition, present=draft.present, group=draft.group,
            value_units=draft.value_units, value_ts=draft.value_ts, counts=tuple(draft.counts),
            recent_ids=unpack_ids(draft.ids), left_ts=draft.left_ts,
            held=tuple(tuple(h) for h in draft.held), offsets=tuple(draft.offsets or ()),
            admitted=tuple(draft.admitted or ()),
        )

    def to_json(self) -> dict[str, Any]:
        return self.draft().to_json()

    def to_bytes(self) -> bytes:
        """The users table's stored value and changelog record."""
        return self.draft().to_bytes()

    @classmethod
    def from_stored(cls, raw: Stored) -> UserState:
        """From the stored value: JSON bytes (this version) or a decoded dict (older ones)."""
        return cls.of(Draft.decode(raw, 0))

    from_json = from_stored


def apply_report(
    state: UserState | None, report: Report | ReportIn, partition: int, rules: EventRules
) -> UserState:
    """New state after an accepted report; Rejected for out_of_domain/not_present/duplicate."""
    draft = state.draft() if state is not None else Draft(partition)
    draft.report(report, partition, rules)
    return UserState.of(draft)


def apply_membership(
    state: UserState | None, event: Membership | MembershipIn, partition: int,
    rules: EventRules,
) -> UserState:
    """New state after a join/leave; Rejected for already_present/unknown_user/unknown_group."""
    draft = state.draft() if state is not None else Draft(partition)
    draft.membership(event, partition, rules)
    return UserState.of(draft)
