"""Per-user state, the event rules that update it, and per-partition aggregates.

Everything here is synchronous and broker-free: the Faust worker only moves bytes in and out.
Nothing here computes a privacy quantity: theta depends only on public laws (core.plan), and
the per-event path only validates, deduplicates and updates sums.
"""

from __future__ import annotations

import base64
import binascii
import copy
import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, NamedTuple

import orjson

from core.learning import SHARE_UNITS
from stream_app.domain.models import Membership, MembershipIn, Rejected, Report, ReportIn, tuple_new

# Dedup ids are kept as 64-bit digests of the report ids. A genuine new report is dropped as a
# duplicate only if its digest equals one of the (at most dedup_window) digests kept for its
# user: probability <= dedup_window / 2**64 per report (3.5e-18 at 64; over 10**12 reports
# the expected number of such drops is 3.5e-6). docs/design.md, "Throughput".
DIGEST_BYTES = 8


def digest_bytes(report_id: str) -> bytes:
    """The 8 bytes of a report id's digest (blake2b: stable across processes and versions)."""
    return hashlib.blake2b(report_id.encode("utf-8", "surrogatepass"),
                           digest_size=DIGEST_BYTES).digest()


def report_digest(report_id: str) -> int:
    """The 64-bit digest of a report id: ``digest_bytes`` as a little-endian integer."""
    return int.from_bytes(digest_bytes(report_id), "little")


def pack_ids(ids: Sequence[int]) -> str:
    """Digests -> one base64 string (8 bytes per id) for the state's JSON."""
    return base64.b64encode(struct.pack(f"<{len(ids)}Q", *ids)).decode("ascii")


def unpack_ids(text: str) -> tuple[int, ...]:
    raw = base64.b64decode(text)
    return struct.unpack(f"<{len(raw) // DIGEST_BYTES}Q", raw)


def _ids_blob(doc: dict[str, Any]) -> bytes:
    """The stored document's digests as their packed bytes (8 per id, little-endian)."""
    if "ids" not in doc:  # an older version's list of report-id strings
        return b"".join(digest_bytes(str(r)) for r in doc.get("recent_ids", ()))
    raw = binascii.a2b_base64(doc["ids"])  # base64.b64decode(text), without its Python wrapper
    if len(raw) % DIGEST_BYTES:
        raise ValueError("stored ids are not whole 8-byte digests")
    return raw


def _holds(blob: bytes | bytearray, digest: bytes) -> bool:
    """Whether one of the packed digests in ``blob`` is ``digest`` (aligned matches only)."""
    i = blob.find(digest)
    while i >= 0:
        if i % DIGEST_BYTES == 0:
            return True
        i = blob.find(digest, i + 1)
    return False


def encode_state(doc: dict[str, Any]) -> bytes:
    """A state document's stored bytes (JSON)."""
    try:
        # orjson's bytes keep its whole output buffer (measured: 4 KiB each): the copy is
        # exactly sized (~480 B per user in memory instead of 4.2 KiB)
        return bytes(memoryview(orjson.dumps(doc)))
    except TypeError:  # an int beyond 64 bits (a very fine grid): the slow path
        return json.dumps(doc, separators=(",", ":")).encode()


def decode_state(raw: bytes | str | dict[str, Any]) -> dict[str, Any]:
    """The stored value as a document: JSON bytes (this version) or a dict (older ones)."""
    if isinstance(raw, dict):
        return raw
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:  # an int beyond 64 bits
        doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("a stored user state is a JSON object")
    return doc


def _put_extras(doc: dict[str, Any], left_ts: float | None, held: list[Any],
                offsets: list[int] | None) -> None:
    """The optional fields, written only when set (most users: none but the offsets)."""
    if left_ts is not None:
        doc["left_ts"] = left_ts
    if held:
        doc["held"] = held
    if offsets:
        doc["o"] = offsets


class Contribution(NamedTuple):
    """What one user adds to its partition's aggregate."""

    units: int  # to the sum (its current value while present, else 0)
    group: str | None
    share: tuple[int, ...] | None  # to its group's histogram sum (None: nothing)


def user_share(counts: Sequence[int]) -> tuple[int, ...]:
    """``core.learning.user_share`` (a user's normalised histogram), computed the same way with
    less Python per call: the largest remainders are found with a C-level sort key, and
    ``sorted(..., reverse=True)`` keeps equal remainders in index order, as core's key
    ``(-remainder, j)`` does. Two per touched user and batch; tests/stream_app/domain/test_state.py
    checks it against core's."""
    total = sum(counts)
    if total <= 0:
        return (0,) * len(counts)
    floors = [c * SHARE_UNITS // total for c in counts]
    left = SHARE_UNITS - sum(floors)
    if left:
        rems = [c * SHARE_UNITS % total for c in counts]
        for j in sorted(range(len(rems)), key=rems.__getitem__, reverse=True)[:left]:
            floors[j] += 1
    return tuple(floors)


def has_share(present: bool, group: str | None, counts: Sequence[int]) -> bool:
    """Whether a user adds a share to its group's histogram sum (present, in a group, with at
    least one report)."""
    return present and group is not None and any(counts)


def _contribution(
    present: bool, group: str | None, value_units: int | None, counts: Sequence[int],
    share: tuple[int, ...] | None = None,
) -> Contribution:
    """`share`: ``user_share(counts)`` when the caller has it already (a batch's shares are
    computed together, stream_app/domain/contributions.py)."""
    units = value_units if present and value_units is not None else 0
    if not has_share(present, group, counts):
        return tuple_new(Contribution, (units, group, None))
    return tuple_new(Contribution, (units, group,
                                    share if share is not None else user_share(counts)))


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
    ``left_ts`` is the ``ts`` of the user's latest leave (a report produced before it and
    arriving after it changes nothing). ``held``: reports that arrived before the user's join,
    kept for ``join_grace_seconds`` (``stream_app.domain.hold.Held``). ``offsets``: per input kind
    (reports, membership) the offset of the newest record this state reflects on the user's
    partition: ``(partition, reports offset, membership offset)``, -1 for none (a replayed
    record is recognised exactly, docs/design.md "Per-user order").
    """

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

    @property
    def contribution_units(self) -> int:
        """What the user adds to X = sum over present users of their current value."""
        return self.value_units if self.present and self.value_units is not None else 0

    def to_json(self) -> dict[str, Any]:
        doc = {
            "partition": self.partition, "present": self.present, "group": self.group,
            "value_units": self.value_units, "value_ts": self.value_ts,
            "counts": list(self.counts), "ids": pack_ids(self.recent_ids),
        }
        _put_extras(doc, self.left_ts, [list(h) for h in self.held],
                    list(self.offsets) or None)
        return doc

    def to_bytes(self) -> bytes:
        """The JSON of ``to_json`` as bytes (the users table's stored value and changelog)."""
        return encode_state(self.to_json())

    @classmethod
    def from_stored(cls, raw: bytes | str | dict[str, Any]) -> UserState:
        """From the stored value: JSON bytes (this version) or a decoded dict (older ones)."""
        return cls.from_json(decode_state(raw))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> UserState:
        return cls(
            partition=int(d["partition"]),
            present=bool(d["present"]),
            group=d.get("group"),
            value_units=d.get("value_units"),
            value_ts=d.get("value_ts"),
            counts=tuple(map(int, d.get("counts", ()))),
            recent_ids=(unpack_ids(d["ids"]) if "ids" in d
                        else tuple(report_digest(str(r)) for r in d.get("recent_ids", ()))),
            left_ts=d.get("left_ts"),
            held=tuple(tuple(h) for h in d.get("held", ())),
            offsets=tuple(map(int, d.get("o", ()))),
        )

    @property
    def share(self) -> tuple[int, ...] | None:
        """The user's normalised histogram (core.learning units) while present, else None."""
        return self.contribution().share

    def contribution(self) -> Contribution:
        return _contribution(self.present, self.group, self.value_units, self.counts)


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
        # value -> (index, units) for the values a report may carry (index_and_units)
        object.__setattr__(self, "report_values", {
            float(v): (j, u) for v, j in self._index.items()  # type: ignore[attr-defined]
            if (u := self._units[j]) is not None})  # type: ignore[attr-defined]

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


_NO_HELD: list[list[Any]] = []  # never appended to (hold.hold builds a new list)


class Draft:
    """A user's state while records are applied to it: mutable, one per touched user in a
    batch, read from the stored value and encoded once (``decode``, ``report``/``membership``
    per record, ``to_bytes``). The digests stay packed (``ids``: 8 bytes each, as stored).

    Each method checks everything before it changes anything, so a rejected record leaves the
    draft as it was. ``apply_report``/``apply_membership`` are the one-record form.
    """

    __slots__ = ("exists", "partition", "present", "group", "value_units", "value_ts",
                 "counts", "ids", "left_ts", "held", "offsets")

    def __init__(self, partition: int) -> None:
        """No state yet (a user never seen)."""
        self.exists = False
        self.partition = partition
        self.present = False
        self.group: str | None = None
        self.value_units: int | None = None
        self.value_ts: float | None = None
        self.counts: list[int] = []
        self.ids = bytearray()
        self.left_ts: float | None = None
        # stream_app.domain.hold.Held fields, oldest first (shared empty defaults: most drafts never
        # hold a report)
        self.held: list[list[Any]] = _NO_HELD
        self.offsets: list[int] | None = None  # [partition, reports offset, membership offset]

    @classmethod
    def decode(cls, raw: bytes | str | dict[str, Any], partition: int) -> Draft:
        """From the stored value (as ``UserState.from_stored`` reads it)."""
        d = decode_state(raw)
        draft = cls(partition)
        draft.exists = True
        draft.partition = int(d["partition"])
        draft.present = bool(d["present"])
        draft.group = d.get("group")
        draft.value_units = d.get("value_units")
        draft.value_ts = d.get("value_ts")
        draft.counts = list(map(int, d.get("counts", ())))
        draft.ids = bytearray(_ids_blob(d))
        draft.left_ts = d.get("left_ts")
        held, offsets = d.get("held"), d.get("o")
        if held or offsets:
            if isinstance(raw, dict):  # a caller's document: copy what the draft changes
                d = copy.deepcopy(d)
                held, offsets = d.get("held"), d.get("o")
            # (freshly decoded otherwise: the draft owns these lists)
            if held:
                draft.held = held
            if offsets:
                draft.offsets = offsets
        return draft

    @classmethod
    def of(cls, state: UserState | None, partition: int) -> Draft:
        draft = cls(partition)
        if state is not None:
            draft.exists = True
            draft.partition, draft.present, draft.group = state.partition, state.present, \
                state.group
            draft.value_units, draft.value_ts = state.value_units, state.value_ts
            draft.counts = list(state.counts)
            draft.ids = bytearray(struct.pack(f"<{len(state.recent_ids)}Q", *state.recent_ids))
            draft.left_ts = state.left_ts
            draft.held = [list(h) for h in state.held]
            draft.offsets = list(state.offsets) or None
        return draft

    def replayed(self, kind: int, partition: int, offset: int | None) -> bool:
        """Whether this state already reflects the record at ``offset`` of the user's input
        partition for ``kind`` (1: reports, 2: membership; a crash or rebalance replay): exact,
        whatever its length."""
        o = self.offsets
        return offset is not None and o is not None and o[0] == partition and offset <= o[kind]

    def note_offset(self, kind: int, partition: int, offset: int | None) -> None:
        if offset is None:
            return
        o = self.offsets
        if o is None or o[0] != partition:  # (a key that moved: a new offset sequence)
            o = self.offsets = [partition, -1, -1]
        o[kind] = offset

    def report(self, report: Report | ReportIn, partition: int, rules: EventRules) -> None:
        """Apply an accepted report; Rejected for out_of_domain/not_present/duplicate."""
        hit = rules.report_values.get(report.value)  # type: ignore[attr-defined]
        j, units = hit if hit is not None else rules.index_and_units(report.value)
        group = self.group
        if not self.present:
            if not rules.auto_join:
                raise Rejected("not_present")
            group = group or rules.default_group
            if group is None:
                raise Rejected("unknown_group")
        digest = hashlib.blake2b(report.report_id.encode("utf-8", "surrogatepass"),
                                 digest_size=DIGEST_BYTES).digest()  # digest_bytes, inline
        ids = self.ids
        if ids.find(digest) >= 0 and _holds(ids, digest):
            raise Rejected("duplicate_report")
        k = len(rules.domain)
        if len(self.counts) != k:
            self.counts = [0] * k
        self.counts[j] += 1
        ids += digest
        extra = len(ids) - rules.dedup_window * DIGEST_BYTES
        if extra > 0:
            del ids[:extra]
        if self.value_ts is None or report.ts >= self.value_ts:
            self.value_units, self.value_ts = units, report.ts
        self.exists, self.partition, self.present, self.group = True, partition, True, group

    def membership(
        self, event: Membership | MembershipIn, partition: int, rules: EventRules
    ) -> None:
        """Apply a join/leave; Rejected for already_present/unknown_user/unknown_group."""
        if event.event == "join":
            if self.present:
                raise Rejected("already_present")
            group = event.group or self.group or rules.default_group
            if group is None or group not in rules.known_groups:
                raise Rejected("unknown_group")
            if not self.exists or not self.counts:  # (a user holding reports has none)
                self.counts = [0] * len(rules.domain)
            self.exists, self.present, self.group = True, True, group
        elif not self.present:
            raise Rejected("unknown_user")
        else:
            self.present = False
            if self.left_ts is None or event.ts > self.left_ts:
                self.left_ts = event.ts
        self.partition = partition

    def has_share(self) -> bool:
        return has_share(self.present, self.group, self.counts)

    def contribution(self, share: tuple[int, ...] | None = None) -> Contribution:
        """`share`: ``user_share(self.counts)`` if already computed."""
        return _contribution(self.present, self.group, self.value_units, self.counts, share)

    def to_json(self) -> dict[str, Any]:
        """``UserState.to_json`` of ``freeze()``, without building the state."""
        doc = {
            "partition": self.partition, "present": self.present, "group": self.group,
            "value_units": self.value_units, "value_ts": self.value_ts,
            "counts": self.counts, "ids": base64.b64encode(self.ids).decode("ascii"),
        }
        _put_extras(doc, self.left_ts, self.held, self.offsets)
        return doc

    def to_bytes(self) -> bytes:
        """``UserState.to_bytes`` of ``freeze()``: the stored value."""
        assert self.exists, "a draft without an accepted record has no state"
        return encode_state(self.to_json())

    def freeze(self) -> UserState:
        assert self.exists, "a draft without an accepted record has no state"
        return UserState(
            partition=self.partition, present=self.present, group=self.group,
            value_units=self.value_units, value_ts=self.value_ts, counts=tuple(self.counts),
            recent_ids=struct.unpack(f"<{len(self.ids) // DIGEST_BYTES}Q", self.ids),
            left_ts=self.left_ts, held=tuple(tuple(h) for h in self.held),
            offsets=tuple(self.offsets or ()),
        )


def apply_report(
    state: UserState | None, report: Report | ReportIn, partition: int, rules: EventRules
) -> UserState:
    """New state after an accepted report; Rejected for out_of_domain/not_present/duplicate."""
    draft = Draft.of(state, partition)
    draft.report(report, partition, rules)
    return draft.freeze()


def apply_membership(
    state: UserState | None, event: Membership | MembershipIn, partition: int,
    rules: EventRules,
) -> UserState:
    """New state after a join/leave; Rejected for already_present/unknown_user/unknown_group."""
    draft = Draft.of(state, partition)
    draft.membership(event, partition, rules)
    return draft.freeze()


@dataclass
class PartitionAggregate:
    """The partial aggregates of one input partition, kept incrementally (O(K) per user)."""

    partition: int
    sum_units: int = 0
    group_units: dict[str, list[int]] = field(default_factory=dict)
    newest_ts: float = 0.0
    dirty: bool = True
    # users of this partition holding reports until they join (user -> how many): the
    # expiry sweep's index and the worker's held total (stream_app.domain.hold)
    held_users: dict[str, int] = field(default_factory=dict)

    def note_held(self, user_id: str, count: int) -> None:
        if count:
            self.held_users[user_id] = count
        else:
            self.held_users.pop(user_id, None)

    @property
    def held_count(self) -> int:
        return sum(self.held_users.values())

    def apply(self, old: UserState | None, new: UserState) -> None:
        """Replace one user's contribution."""
        self.replace(old.contribution() if old is not None else None, new.contribution())

    def replace(self, old: Contribution | None, new: Contribution) -> None:
        """Replace one user's contribution ``old`` (None: a new user) by ``new``."""
        self.sum_units += new.units - (old.units if old is not None else 0)
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
                agg.note_held(_user_id, len(st.held))
                if st.value_ts is not None and st.value_ts > agg.newest_ts:
                    agg.newest_ts = st.value_ts
        agg.dirty = True
        return agg
