"""Per-user state, the event rules that update it, and per-partition aggregates.

Everything here is synchronous and broker-free: the Faust worker only moves bytes in and out.
Nothing here computes a privacy quantity: theta depends only on public laws (core.plan), and
the per-event path only validates, deduplicates and updates sums.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import orjson

from core.learning import user_share
from stream_app.models import Membership, Rejected, Report

# Dedup ids are kept as 64-bit digests of the report ids. A genuine new report is dropped as a
# duplicate only if its digest equals one of the (at most dedup_window) digests kept for its
# user: probability <= dedup_window / 2**64 per report (3.5e-18 at 64; over 10**12 reports
# the expected number of such drops is 3.5e-6). docs/design.md, "Throughput".
DIGEST_BYTES = 8


def report_digest(report_id: str) -> int:
    """The 64-bit digest of a report id (blake2b: stable across processes and versions)."""
    d = hashlib.blake2b(report_id.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES)
    return int.from_bytes(d.digest(), "little")


def pack_ids(ids: Sequence[int]) -> str:
    """Digests -> one base64 string (8 bytes per id) for the state's JSON."""
    return base64.b64encode(struct.pack(f"<{len(ids)}Q", *ids)).decode("ascii")


def unpack_ids(text: str) -> tuple[int, ...]:
    raw = base64.b64decode(text)
    return struct.unpack(f"<{len(raw) // DIGEST_BYTES}Q", raw)


@dataclass(frozen=True)
class UserState:
    """One user's state (stored as JSON in a changelog-backed table keyed by user_id).

    ``value_units`` is the latest value in grid units (value / 2**grid_log2, an exact int).
    ``counts[j]`` counts the user's accepted reports equal to ``domain[j]`` (the estimate P_i).
    ``recent_ids`` holds the 64-bit digests (``report_digest``) of at most ``dedup_window``
    report ids, oldest first; in JSON one base64 string ``ids`` (a state written by an older
    version, with a list of report-id strings ``recent_ids``, is digested when read).
    ``partition`` is the input partition the user's events arrive on (key = user_id).
    ``group`` is a configured group (the join's, or the default group).
    """

    partition: int
    present: bool = False
    group: str | None = None
    value_units: int | None = None
    value_ts: float | None = None
    counts: tuple[int, ...] = ()
    recent_ids: tuple[int, ...] = ()

    @property
    def contribution_units(self) -> int:
        """What the user adds to X = sum over present users of their current value."""
        return self.value_units if self.present and self.value_units is not None else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition, "present": self.present, "group": self.group,
            "value_units": self.value_units, "value_ts": self.value_ts,
            "counts": list(self.counts), "ids": pack_ids(self.recent_ids),
        }

    def to_bytes(self) -> bytes:
        """The JSON of ``to_json`` as bytes (the users table's stored value and changelog)."""
        doc = self.to_json()
        try:
            # orjson's bytes keep its whole output buffer (measured: 4 KiB each): the copy is
            # exactly sized (~480 B per user in memory instead of 4.2 KiB)
            return bytes(memoryview(orjson.dumps(doc)))
        except TypeError:  # an int beyond 64 bits (a very fine grid): the slow path
            return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_stored(cls, raw: bytes | str | dict[str, Any]) -> UserState:
        """From the stored value: JSON bytes (this version) or a decoded dict (older ones)."""
        if isinstance(raw, dict):
            return cls.from_json(raw)
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:  # an int beyond 64 bits
            doc = json.loads(raw)
        return cls.from_json(doc)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UserState:
        return cls(
            partition=int(d["partition"]),
            present=bool(d["present"]),
            group=d.get("group"),
            value_units=d.get("value_units"),
            value_ts=d.get("value_ts"),
            counts=tuple(int(c) for c in d.get("counts", ())),
            recent_ids=(unpack_ids(d["ids"]) if "ids" in d
                        else tuple(report_digest(str(r)) for r in d.get("recent_ids", ()))),
        )

    @property
    def share(self) -> tuple[int, ...] | None:
        """The user's normalised histogram (core.learning units) while present, else None."""
        if not self.present or self.group is None or not any(self.counts):
            return None
        return user_share(self.counts)


@dataclass(frozen=True)
class EventRules:
    """What the event rules need from the settings (which records are accepted)."""

    domain: tuple[float, ...]
    grid_log2: int
    dedup_window: int
    auto_join: bool
    known_groups: frozenset[str]
    default_group: str | None  # the group of a join (or auto-join) that names none

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {float(v): j for j, v in enumerate(self.domain)})
        # Units of each domain value, computed once (a report's value is a domain value).
        object.__setattr__(self, "_units", tuple(self._grid_units(v) for v in self.domain))

    def domain_index(self, value: float) -> int:
        j = self._index.get(float(value))  # type: ignore[attr-defined]
        if j is None:
            raise Rejected("out_of_domain")
        return int(j)

    def index_and_units(self, value: float) -> tuple[int, int]:
        """(domain index, grid units) of a report's value; Rejected out_of_domain."""
        j = self._index.get(float(value))  # type: ignore[attr-defined]
        if j is None:
            raise Rejected("out_of_domain")
        units = self._units[j]  # type: ignore[attr-defined]
        if units is None:
            raise Rejected("out_of_domain")
        return j, units

    def units(self, value: float) -> int:
        j = self._index.get(float(value))  # type: ignore[attr-defined]
        if j is not None:
            units = self._units[j]  # type: ignore[attr-defined]
            if units is None:
                raise Rejected("out_of_domain")
            return int(units)
        return self._units_or_reject(value)

    def _grid_units(self, value: float) -> int | None:
        q = Fraction(value) / Fraction(2) ** self.grid_log2
        return int(q) if q.denominator == 1 else None

    def _units_or_reject(self, value: float) -> int:
        units = self._grid_units(value)
        if units is None:  # domain values are on the grid (checked at start-up)
            raise Rejected("out_of_domain")
        return units


def _new_user(partition: int, rules: EventRules) -> UserState:
    return UserState(partition=partition, counts=(0,) * len(rules.domain))


def apply_report(
    state: UserState | None, report: Report, partition: int, rules: EventRules
) -> UserState:
    """New state after an accepted report; Rejected for out_of_domain/not_present/duplicate."""
    j, units = rules.index_and_units(report.value)
    if state is None or not state.present:
        if not rules.auto_join:
            raise Rejected("not_present")
        base = state or _new_user(partition, rules)
        group = base.group or rules.default_group
        if group is None:
            raise Rejected("unknown_group")
        state = replace(base, present=True, group=group)
    digest = report_digest(report.report_id)
    if digest in state.recent_ids:
        raise Rejected("duplicate_report")
    k = len(rules.domain)
    counts = list(state.counts) if len(state.counts) == k else [0] * k
    counts[j] += 1
    ids = state.recent_ids
    ids = (*ids, digest) if len(ids) < rules.dedup_window else (*ids, digest)[-rules.dedup_window:]
    newer = state.value_ts is None or report.ts >= state.value_ts
    # the constructor, not dataclasses.replace: this runs once per report (replace is ~4x slower)
    return UserState(
        partition=partition, present=state.present, group=state.group,
        value_units=units if newer else state.value_units,
        value_ts=report.ts if newer else state.value_ts,
        counts=tuple(counts), recent_ids=ids,
    )


def apply_membership(
    state: UserState | None, event: Membership, partition: int, rules: EventRules
) -> UserState:
    """New state after a join/leave; Rejected for already_present/unknown_user/unknown_group."""
    if event.event == "join":
        if state is not None and state.present:
            raise Rejected("already_present")
        base = state or _new_user(partition, rules)
        group = event.group or base.group or rules.default_group
        if group is None or group not in rules.known_groups:
            raise Rejected("unknown_group")
        return replace(base, partition=partition, present=True, group=group)
    if state is None or not state.present:
        raise Rejected("unknown_user")
    return replace(state, partition=partition, present=False)


@dataclass
class PartitionAggregate:
    """The partial aggregates of one input partition, kept incrementally (O(K) per user)."""

    partition: int
    sum_units: int = 0
    group_units: dict[str, list[int]] = field(default_factory=dict)
    newest_ts: float = 0.0
    dirty: bool = True

    def apply(self, old: UserState | None, new: UserState) -> None:
        """Replace one user's contribution."""
        self.sum_units += new.contribution_units - (old.contribution_units if old else 0)
        for state, sign in ((old, -1), (new, 1)):
            share = state.share if state is not None else None
            if share is None:
                continue
            assert state is not None and state.group is not None
            bins = self.group_units.setdefault(state.group, [0] * len(share))
            for j, units in enumerate(share):
                bins[j] += sign * units
        self.dirty = True

    def note_event(self, ts: float | None) -> None:
        if ts is not None and ts > self.newest_ts:
            self.newest_ts = ts
        self.dirty = True

    @classmethod
    def rebuild(
        cls, partition: int, users: Sequence[tuple[str, UserState]]
    ) -> PartitionAggregate:
        """From the recovered table (once per assignment, not per event)."""
        agg = cls(partition=partition)
        for _user_id, st in users:
            if st.partition == partition:
                agg.apply(None, st)
                if st.value_ts is not None and st.value_ts > agg.newest_ts:
                    agg.newest_ts = st.value_ts
        agg.dirty = True
        return agg
