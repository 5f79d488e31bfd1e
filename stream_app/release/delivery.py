"""Whether the release owner publishes in Kafka transactions (exactly once) or not (at least
once), decided once per process (docs/privacy.md, "Two concurrent release owners"; docs/design.md,
"Fences").

``release_transactions``:
- ``off``: at-least-once, said once at start.
- ``required``: transactions or nothing: a broker without them stops the start (exit 2), or,
  when that is learned only later, no release is published.
- ``auto`` (the default): transactions, unless the broker answers a producer-id request with an
  error that says it has no transactions (``NO_TRANSACTIONS``: tansu answers InitProducerId with
  UNKNOWN_SERVER_ERROR); then at-least-once, said once. Never on any other error (an
  authorization error, a timeout, an unreachable broker: the tick fails and is tried again), and
  never once this process was granted a transactional producer id.

At start the worker asks for an idempotent producer id (InitProducerId without a transactional
id: it fences nobody) to say which it will be; when that answer says nothing (an authorization
error, the broker not up yet), the first transactional start of the release owner decides.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from aiokafka import AIOKafkaProducer
from aiokafka.errors import IncompatibleBrokerVersion, UnknownError, UnsupportedVersionError

from pufferfish_core.errors import PufferfishInputError
from stream_app.kafka.clients import aiokafka_kwargs
from stream_app.release.journal import bounded, quietly
from stream_app.settings import Settings

log = logging.getLogger(__name__)

# What a broker without transactions answers a producer-id request with.
NO_TRANSACTIONS: tuple[type[BaseException], ...] = (
    UnknownError, UnsupportedVersionError, IncompatibleBrokerVersion)

WHY = ("two release owners at once (a frozen owner that resumes after a takeover) can publish "
       "one tick twice")


class TransactionsUnavailable(PufferfishInputError):
    """release_transactions=required on a broker without transactions."""


def no_transactions(exc: BaseException) -> bool:
    return isinstance(exc, NO_TRANSACTIONS)


@contextlib.contextmanager
def quiet_producer_id_errors() -> Iterator[None]:
    """aiokafka logs a refused InitProducerId at ERROR before raising it: the worker says it
    once, in its own words."""
    logger = logging.getLogger("aiokafka.producer.sender")

    def drop(record: logging.LogRecord) -> bool:
        return "InitProducerIdRequest" not in record.getMessage()

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class Delivery:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.mode = settings.release_transactions
        # True: transactions; False: at-least-once; None: not decided yet
        self.transactional: bool | None = False if self.mode == "off" else None

    @property
    def transactional_id(self) -> str:
        return self.settings.transactional_id

    def granted(self) -> None:
        """This process was granted a transactional producer id: transactions from now on."""
        if self.transactional is None:
            log.info("releases are exactly-once: each tick is published in one transaction "
                     "(transactional id %s)", self.transactional_id)
        self.transactional = True

    def refused(self, exc: BaseException) -> bool:
        """A producer-id request failed with ``exc``: True when that decides at-least-once
        (said once); TransactionsUnavailable when transactions are required."""
        if self.transactional is not None or not no_transactions(exc):
            return False
        if self.mode == "required":
            raise TransactionsUnavailable(
                "release_transactions", f"required, but the broker has no transactions "
                f"(InitProducerId: {type(exc).__name__}); set release_transactions=auto or off "
                "to publish at least once (docs/privacy.md)")
        self.transactional = False
        log.warning("releases are at-least-once: the broker has no transactions "
                    "(InitProducerId: %s), so %s (docs/privacy.md, \"Two concurrent release "
                    "owners\")", type(exc).__name__, WHY)
        return True

    async def announce(self) -> None:
        """At start: say how releases will be published (an idempotent producer id asked for,
        which fences nobody); an answer that says nothing leaves it to the release owner."""
        if self.mode == "off":
            log.warning("releases are at-least-once (release_transactions=off): %s "
                        "(docs/privacy.md, \"Two concurrent release owners\")", WHY)
            return
        producer = AIOKafkaProducer(**aiokafka_kwargs(self.settings), enable_idempotence=True)
        try:
            with quiet_producer_id_errors():
                await bounded(producer.start(), "producer id probe")
        except Exception as exc:  # noqa: BLE001 - decided by the release owner's first start
            self.refused(exc)
        else:
            log.info("the broker grants producer ids: releases will be published in "
                     "transactions (transactional id %s)", self.transactional_id)
        finally:
            await quietly(producer.stop(), "producer id probe stop")
