"""The release agent's producer: acks=all, every call bounded, dropped and rebuilt after errors.

With transactions (delivery.py) the producer carries the releaser's transactional id and is
built anew by ``claim`` each time the releaser (re)reads its journals: its InitProducerId fences
every earlier producer of that id (another worker that owned the releases, or this one before a
failure) and aborts the transaction it left open, so nothing of an earlier owner reaches the log
after the read. A tick's records are sent between ``begin`` and ``end`` (one transaction), each
awaited in turn (a node draw is in the log before the release that uses it). A producer that was
fenced is dropped and ``fenced`` is set: the releaser steps down (docs/design.md, "Fences").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced

from stream_app.kafka.clients import aiokafka_kwargs
from stream_app.metrics import Metrics
from stream_app.release.delivery import Delivery, quiet_producer_id_errors
from stream_app.release.journal import JournalError, bounded, quietly
from stream_app.settings import Settings

log = logging.getLogger(__name__)

SEND_TIMEOUT_MS = 15000
# A transaction left open by an owner that died mid-tick holds the readers of committed records
# at its first offset until a new owner's claim aborts it, or until this (Kafka's default).
TRANSACTION_TIMEOUT_MS = 60000


def _retrieve(producer: AIOKafkaProducer) -> None:
    """When a fence ends aiokafka's sender, the transaction's waiter and the drain waiter of
    every batch left hold ProducerFenced; nobody awaits them once the producer is dropped, and
    asyncio would log each as never retrieved (a traceback) instead of the one line said.
    They are retrieved now, and again once aiokafka's own callback on the sender's end has
    failed them: a producer whose stop did not finish (the broker was down) keeps its sender
    running and is fenced later, by the next claim once the broker is back; a sender that has
    just ended has that callback still queued."""
    _retrieve_waiters(producer)
    sender = getattr(getattr(producer, "_sender", None), "sender_task", None)
    if isinstance(sender, asyncio.Future):  # (when done: called soon, after aiokafka's)
        sender.add_done_callback(lambda _: _retrieve_waiters(producer))


def _retrieve_waiters(producer: AIOKafkaProducer) -> None:
    manager = getattr(producer, "_txn_manager", None)
    accumulator = getattr(producer, "_message_accumulator", None)
    batches = [b for q in getattr(accumulator, "_batches", {}).values() for b in q]
    batches += list(getattr(accumulator, "_pending_batches", ()))
    waiters = [getattr(manager, "_transaction_waiter", None),
               *(getattr(b, "_drain_waiter", None) for b in batches)]
    for waiter in waiters:
        if isinstance(waiter, asyncio.Future) and waiter.done() and not waiter.cancelled():
            waiter.exception()


class Publisher:
    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self.delivery = Delivery(settings)
        self._producer: AIOKafkaProducer | None = None
        self._open = False  # a transaction begun and not ended
        self._failed = False  # a send of the open transaction failed: it is aborted
        self.fenced = False  # another producer of the id was started after ours

    @property
    def transactional(self) -> bool:
        return self.delivery.transactional is True

    @property
    def open(self) -> bool:
        """A transaction is begun and not ended."""
        return self._open

    def _new(self, transactional: bool) -> AIOKafkaProducer:
        extra: dict[str, object] = (
            dict(transactional_id=self.settings.transactional_id,
                 transaction_timeout_ms=TRANSACTION_TIMEOUT_MS) if transactional else {})
        return AIOKafkaProducer(**aiokafka_kwargs(self.settings), acks="all", linger_ms=0,
                                request_timeout_ms=SEND_TIMEOUT_MS, **extra)

    async def _start(self, producer: AIOKafkaProducer) -> None:
        try:
            with quiet_producer_id_errors():
                await bounded(producer.start(), "release producer start")
        except BaseException:
            await quietly(producer.stop(), "release producer stop")
            raise

    async def claim(self) -> None:
        """Before a (new) owner reads the journals: with transactions (or not decided yet), a
        new transactional producer; its InitProducerId fences every earlier one of the id and
        aborts what that left open. Without transactions: nothing (``ready`` starts one)."""
        if self.delivery.transactional is False:
            return
        await self.stop()
        self.fenced = False
        producer = self._new(transactional=True)
        try:
            await self._start(producer)
        except Exception as exc:
            if self.delivery.refused(exc):
                return  # at-least-once from now on
            raise
        self.delivery.granted()
        self._producer = producer

    async def ready(self) -> None:
        """The producer is up (raises while the broker is unreachable). With transactions it
        must have been claimed since the journals were last read."""
        if self._producer is not None:
            return
        if self.delivery.transactional is not False:
            raise JournalError("the release producer was dropped: the journals are read again "
                               "(and the producer claimed) before the next tick")
        producer = self._new(transactional=False)
        await self._start(producer)
        self._producer = producer

    async def stop(self) -> None:
        producer, self._producer = self._producer, None
        self._open = False
        if producer is not None:
            _retrieve(producer)
            await quietly(producer.stop(), "release producer stop")

    async def tick(self, run: Callable[[], Awaitable[object]]) -> tuple[bool, object]:
        """``run()`` in one transaction when publishing in transactions (else as it is):
        (True, its result) once committed; (False, None) when the commit failed (what it sent
        may be in the log; ``fenced`` says whether another owner took over)."""
        if not await self.begin():
            return True, await run()  # at-least-once
        try:
            result = await run()
        except Exception:
            await self.end(commit=False)  # cancelled: the releaser drops the producer
            raise
        return (True, result) if await self.end(commit=True) else (False, None)

    async def begin(self) -> bool:
        """Begin the tick's transaction; False without transactions (nothing to end)."""
        if not self.transactional:
            return False
        await self.ready()
        assert self._producer is not None
        await bounded(self._producer.begin_transaction(), "release transaction begin")
        self._open, self._failed = True, False
        return True

    async def end(self, commit: bool) -> bool:
        """Commit the tick's transaction (abort it if ``commit`` is False or a send failed);
        True when it committed. A producer that failed here is dropped: the next claim aborts
        what it left open."""
        producer, was_open, self._open = self._producer, self._open, False
        if producer is None or not was_open:
            return False  # dropped after a failed send (counted and logged there)
        commit = commit and not self._failed
        what = "release transaction commit" if commit else "release transaction abort"
        try:
            await bounded(producer.commit_transaction() if commit
                          else producer.abort_transaction(), what)
        except Exception as exc:  # noqa: BLE001 - broker trouble must not kill the worker
            await self._failure(what, exc)
            return False
        return commit

    async def send(self, topic: str, payload: bytes) -> bool:
        """Send to partition 0 and wait for the ack; False (counted, logged) on any failure."""
        try:
            await self.ready()
            assert self._producer is not None
            # aiokafka can keep retrying a batch whose connection died: bound the wait too
            await bounded(self._producer.send_and_wait(topic, payload, partition=0),
                          f"{topic} send", SEND_TIMEOUT_MS / 1000 + 10.0)
        except Exception as exc:  # noqa: BLE001 - broker trouble must not kill the worker
            self._failed = True
            await self._failure(f"{topic} record", exc)
            return False
        return True

    async def _failure(self, what: str, exc: BaseException) -> None:
        """Drop the producer; a fence sets ``fenced`` (the releaser says it), anything else is
        counted and logged here."""
        await self.stop()
        if isinstance(exc, ProducerFenced):
            self.fenced = True
            return
        self.metrics.broker_errors.inc()
        log.error("%s not acknowledged (%s); its seq is skipped", what, type(exc).__name__)
