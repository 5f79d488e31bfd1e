"""A user's state as the input path works on it, and its stored form (the one encoder and
decoder of a user's state: ``UserState`` goes through them too).

Stored as JSON in a changelog-backed table keyed by user_id:
``partition`` (the input partition the user's events arrive on), ``present``, ``group`` (a
configured group: the join's, or the default group), ``value_units`` (the latest value in grid
units, an exact int) and ``value_ts``, ``counts`` (``counts[j]``: accepted reports equal to
``domain[j]``, the estimate P_i), ``ids`` (base64 of the 64-bit digests of at most
``dedup_window`` report ids, oldest first; an older version's list of report-id strings,
``recent_ids``, is digested when read), and when set: ``left_ts`` (the ``ts`` of the latest
leave: a report produced before it and arriving after it changes nothing), ``held`` (reports
that arrived before the join, ``stream_app.domain.hold.Held``) and ``o`` (per input kind the
offset of the newest record the state reflects on the user's partition: ``[partition, reports
offset, membership offset]``, -1 for none; docs/design.md, "Per-user order") and ``a`` (tree
mode: ``[window, admitted units, changes admitted]``, stream_app/domain/admission.py).
Nothing here computes a privacy quantity.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import orjson

from stream_app.domain.admission import Admitted
from stream_app.domain.aggregate import Contribution, contribution_of, has_share
from stream_app.domain.digests import DIGEST_BYTES, holds, ids_text, stored_ids
from stream_app.domain.inputs import MembershipIn, ReportIn
from stream_app.domain.models import Membership, Report
from stream_app.domain.rejection import Rejected
from stream_app.domain.rules import EventRules

Stored = bytes | str | dict[str, Any]  # a user's stored value (older versions: a dict)
REPORTS, MEMBERSHIP = 1, 2  # an input kind: its index in the offsets list

_NO_HELD: list[list[Any]] = []  # never appended to (hold.hold builds a new list)


def encode_state(doc: dict[str, Any]) -> bytes:
    """A state document's stored bytes (JSON)."""
    try:
        # orjson's bytes keep its whole output buffer (measured: 4 KiB each): the copy is
        # exactly sized (~480 B per user in memory instead of 4.2 KiB)
        return bytes(memoryview(orjson.dumps(doc)))
    except TypeError:  # an int beyond 64 bits (a very fine grid): the slow path
        return json.dumps(doc, separators=(",", ":")).encode()


def decode_state(raw: Stored) -> dict[str, Any]:
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


class Draft:
    """A user's state while records are applied to it: mutable, one per touched user in a
    batch, read from the stored value and encoded once (``decode``, ``report``/``membership``
    per record, ``to_bytes``). The digests stay packed (``ids``: 8 bytes each, as stored).

    Each method checks everything before it changes anything, so a rejected record leaves the
    draft as it was.
    """

    __slots__ = ("exists", "partition", "present", "group", "value_units", "value_ts",
                 "counts", "ids", "left_ts", "held", "offsets", "admitted")

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
        # Held fields, oldest first (a shared empty default: most drafts never hold a report)
        self.held: list[list[Any]] = _NO_HELD
        self.offsets: list[int] | None = None  # [partition, reports offset, membership offset]
        self.admitted: Admitted | None = None  # tree mode (stream_app.domain.admission)

    @classmethod
    def decode(cls, raw: Stored, partition: int) -> Draft:
        """From the stored value."""
        d = decode_state(raw)
        draft = cls(partition)
        draft.exists = True
        draft.partition = int(d["partition"])
        draft.present = bool(d["present"])
        draft.group = d.get("group")
        draft.value_units = d.get("value_units")
        draft.value_ts = d.get("value_ts")
        draft.counts = list(map(int, d.get("counts", ())))
        draft.ids = bytearray(stored_ids(d))
        draft.left_ts = d.get("left_ts")
        draft.admitted = d.get("a")
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

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "partition": self.partition, "present": self.present, "group": self.group,
            "value_units": self.value_units, "value_ts": self.value_ts,
            "counts": self.counts, "ids": ids_text(self.ids),
        }
        # the optional fields only when set (most users: none but the offsets)
        if self.left_ts is not None:
            doc["left_ts"] = self.left_ts
        if self.held:
            doc["held"] = self.held
        if self.offsets:
            doc["o"] = self.offsets
        if self.admitted is not None:
            doc["a"] = self.admitted
        return doc

    def to_bytes(self) -> bytes:
        """The stored value."""
        assert self.exists, "a draft without an accepted record has no state"
        return encode_state(self.to_json())

    def replayed(self, kind: int, partition: int, offset: int | None) -> bool:
        """Whether this state already reflects the record at ``offset`` of the user's input
        partition for ``kind`` (REPORTS or MEMBERSHIP; a crash or rebalance replay): exact,
        whatever its length."""
        o = self.offsets
        return offset is not None and o is not None and o[0] == partition and offset <= o[kind]

    def note_offset(self, kind: int, partition: int, offset: int | None) -> None:
        if offset is not None:
            self.note_offsets(partition, offset if kind == REPORTS else -1,
                              offset if kind == MEMBERSHIP else -1)

    def note_offsets(self, partition: int, reports: int, membership: int) -> None:
        """The newest offsets of each kind on ``partition`` (-1: none of that kind)."""
        if reports < 0 and membership < 0:
            return
        o = self.offsets
        if o is None or o[0] != partition:  # (a key that moved: a new offset sequence)
            o = self.offsets = [partition, -1, -1]
        if reports >= 0:
            o[REPORTS] = reports
        if membership >= 0:
            o[MEMBERSHIP] = membership

    def report(self, report: Report | ReportIn, partition: int, rules: EventRules) -> None:
        """Apply an accepted report; Rejected for out_of_domain/not_present/duplicate."""
        before = self.units() if rules.admission is not None else 0
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
        if ids.find(digest) >= 0 and holds(ids, digest):
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
        if rules.admission is not None:
            self.admitted = rules.admission.admit(self.admitted, before, self.units())

    def membership(
        self, event: Membership | MembershipIn, partition: int, rules: EventRules
    ) -> None:
        """Apply a join/leave; Rejected for already_present/unknown_user/unknown_group."""
        before = self.units() if rules.admission is not None else 0
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
        if rules.admission is not None:
            self.admitted = rules.admission.admit(self.admitted, before, self.units())

    def units(self) -> int:
        """The user's raw contribution to the sum (its latest value while present, else 0)."""
        return self.value_units if self.present and self.value_units is not None else 0

    def has_share(self) -> bool:
        return has_share(self.present, self.group, self.counts)

    def contribution(self, share: tuple[int, ...] | None = None) -> Contribution:
        """`share`: ``user_share(self.counts)`` if already computed."""
        return contribution_of(self.present, self.group, self.value_units, self.counts, share)
