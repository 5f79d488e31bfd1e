"""What the ingest engine keeps while it applies one batch: the touched users, the outcomes
that are not a plain acceptance, and the dead letters (stream_app/domain/ingest.py)."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import orjson

from stream_app.domain.aggregate import Contribution, PartitionAggregate
from stream_app.domain.draft import Draft, Stored
from stream_app.domain.inputs import MembershipIn, ReportIn
from stream_app.domain.rejection import IGNORE_REASONS

Item = ReportIn | MembershipIn

# outcomes of a record that are neither accepted nor refused (not dead-lettered)
HELD = "held"  # kept until its user joins (stream_app.domain.hold)
REPLAYED = "replayed"
NOT_REFUSED = frozenset((HELD, *IGNORE_REASONS))


class Letter(NamedTuple):
    """A dead letter's fields (stream_app.domain.models.dead_letter adds the time)."""

    topic: str  # the source topic
    raw: bytes | None
    reason: str
    partition: int | None = None
    offset: int | None = None
    detail: str | None = None


DeadLetters = list[Letter]


class UserStore(Protocol):
    """Where user states live (the worker: a Faust changelog table), as stored bytes."""

    def load(self, user_id: str, event: Any) -> Stored | None: ...

    def save(self, user_id: str, value: bytes, event: Any) -> None: ...

    def aggregate(self, partition: int, event: Any) -> PartitionAggregate: ...

    def held_total(self) -> int:
        """Reports held by the users of the aggregates built so far (stream_app.domain.hold)."""
        ...


class Message(NamedTuple):
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    offset: int | None = None


class Record:
    """An input record outside Faust (the held-report expiry, tests, benchmarks)."""

    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                 offset: int | None = None):
        self.message = Message(topic, partition, key, value, offset)


class Written(NamedTuple):
    """A user as the last batch that wrote it left it: the bytes it stored, and the draft and
    contribution those bytes decode to."""

    value: bytes
    draft: Draft
    contribution: Contribution


class Later:
    """Outcomes of held reports applied at a join (they belong to earlier batches' records)."""

    __slots__ = ("applied", "late", "letters")

    def __init__(self) -> None:
        self.applied = 0
        self.late = 0
        self.letters: DeadLetters = []


class Touched:
    """One user's records in a batch: the stored value before it and the working draft."""

    __slots__ = ("stored", "old", "draft", "key", "partition", "moved", "steps", "accepted",
                 "newest_ts", "later", "seen", "last")

    def __init__(
        self, stored: Stored | None, key: bytes, partition: int, written: Written | None
    ) -> None:
        self.stored = stored
        self.old: Contribution | None
        if stored is None:
            self.draft = Draft(partition)
            self.old = None
        elif written is not None and written.value == stored:
            # the bytes a batch stored (equal bytes: equal state; nothing else wrote
            # this user since): its draft and contribution, without decoding them again
            self.draft, self.old = written.draft, written.contribution
        else:
            self.draft = Draft.decode(stored, partition)
            self.old = self.draft.contribution()
        self.key = key  # of the first record: checked (key and partition)
        self.partition = partition  # of the first record
        self.moved = False  # a record on another partition (then the records are replayed)
        self.steps: list[int] = []  # positions in the batch (ints: nothing for the GC to track)
        self.accepted = 0
        self.newest_ts = 0.0
        self.later: Later | None = None  # what applying held reports at a join gave
        # per input kind (index REPORTS, MEMBERSHIP): the offset the stored state reflects here
        # (-1: none), and the newest of this batch (written to the draft when it is stored)
        o = self.draft.offsets
        self.seen = list(o) if o is not None and o[0] == partition else [partition, -1, -1]
        self.last = [partition, -1, -1]

    def replayed(self, kind: int, offset: int | None) -> bool:
        """Whether the stored state already reflects this record (``Draft.replayed`` against
        the state the batch started from)."""
        return offset is not None and offset <= self.seen[kind]

    def note_offsets(self) -> None:
        """The batch's newest offsets into the draft (before it is encoded)."""
        _, reports, membership = self.last
        self.draft.note_offsets(self.partition, reports, membership)


def is_report_doc(raw: bytes | None) -> bool:
    """On a topic shared by both kinds: a record without an ``event`` field is a report (one
    that is not a JSON object is refused as a report would be)."""
    try:
        doc = orjson.loads(raw) if raw is not None else None
    except orjson.JSONDecodeError:
        return True
    return not (type(doc) is dict and "event" in doc)
