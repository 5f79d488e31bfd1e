"""A batch's writes, acknowledged by the broker before its input offsets may be committed.

The producer's ``send`` only queues a record and returns a future; the record is written when
the future holds the broker's acknowledgement. Faust's flush before a commit does not raise
when a record failed, so a batch whose changelog or dead-letter record was lost would have its
input offsets committed and never be processed again. The worker therefore waits for all of a
batch's futures together (their requests are in flight at once; waiting adds the last one's
round trip) and, when one failed, stops without acknowledging the batch's events
(docs/design.md, "Delivery semantics").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import Any

from pufferfish_core.errors import PufferfishError

# sysexits.h EX_TEMPFAIL: the worker stopped on a write the broker did not acknowledge; its
# input is processed again from the last committed offsets when it is restarted.
EXIT_WRITE_NOT_ACKNOWLEDGED = 75


class WriteNotAcknowledged(PufferfishError):
    """A record of the batch (``what``: changelog, dead letter) was not written."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"a {what} record was not acknowledged by the broker "
                         f"({type(cause).__name__})")
        self.what = what
        self.cause = cause


class PendingWrites:
    """The futures of one batch's sends, by kind of record (changelog, dead letter)."""

    __slots__ = ("_kinds", "_futures")

    def __init__(self) -> None:
        self._kinds: list[str] = []
        self._futures: list[Awaitable[Any]] = []

    async def issue(self, what: str, sends: Awaitable[Sequence[Awaitable[Any]]]) -> None:
        """Await ``sends`` (it queues records and returns their futures) and keep the futures;
        a record the producer refused at once is a write not acknowledged either."""
        try:
            futures = await sends
        except Exception as exc:  # noqa: BLE001 - ProducerSendError, KafkaError, ...
            raise WriteNotAcknowledged(what, exc) from exc
        self._kinds.extend([what] * len(futures))
        self._futures.extend(futures)

    def __len__(self) -> int:
        return len(self._futures)

    async def acknowledged(self) -> dict[str, list[Any]]:
        """Each kind's results (aiokafka's RecordMetadata, in the order of the sends), once
        every send is settled; WriteNotAcknowledged for the first one that failed."""
        kinds, futures = self._kinds, self._futures
        self._kinds, self._futures = [], []
        by_kind: dict[str, list[Any]] = {}
        if not futures:
            return by_kind
        results = await asyncio.gather(*futures, return_exceptions=True)
        for what, result in zip(kinds, results, strict=True):
            if isinstance(result, BaseException):
                raise WriteNotAcknowledged(what, result)
            by_kind.setdefault(what, []).append(result)
        return by_kind


def hold_back(events: Sequence[Any]) -> None:
    """Make sure no ack of these events reaches the consumer (their offsets are never committed
    by this worker): Faust acks a message when its reference count drops to zero, and take_events
    releases one reference per event (docs/design.md, "Delivery semantics")."""
    for event in events:
        event.message.incref()


def first_offsets(events: Sequence[Any]) -> str:
    """``topic[partition]@offset`` of each input partition's first record in the batch."""
    first: dict[tuple[str, int], int] = {}
    for event in events:
        msg = event.message
        first.setdefault((msg.topic, msg.partition), msg.offset)
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(first.items()))
