"""The Kafka client's own broker errors, counted in ``pufferfish_broker_errors_total``.

aiokafka retries a failed connection, fetch, metadata update, heartbeat or coordinator lookup
by itself and never raises it to the worker: it only logs it at ERROR. Without counting those
lines, a worker whose release send was waiting out its bound (up to 25 s, publisher.py) showed
no broker error at all for the first half minute of an outage (docs/operations.md, "Metrics").
Counting the client's ERROR records makes the counter move with the first refused connection.

The count is of records, not outages: aiokafka repeats a line on each retry, so an outage adds
tens per second. Only the level is read; the records' text never reaches the metric.
aiokafka's effective level must let ERROR through: every ``log_level`` the settings accept does
(tests/stream_app/faust_adapter/test_client_errors.py pins the logger names on a real client).
"""

from __future__ import annotations

import logging

from prometheus_client import Counter

CLIENT_LOGGER = "aiokafka"  # the records of aiokafka.client, .consumer.*, .producer.* pass it


class ClientErrorCount(logging.Handler):
    """Counts each ERROR (or worse) record of the Kafka client; writes nothing."""

    def __init__(self, errors: Counter) -> None:
        super().__init__(level=logging.ERROR)
        self.errors = errors

    def emit(self, record: logging.LogRecord) -> None:
        self.errors.inc()


def count_client_errors(errors: Counter) -> ClientErrorCount:
    """Count the client's errors in ``errors`` from now on (a second call replaces the first
    handler: one count per process). Returns the handler."""
    logger = logging.getLogger(CLIENT_LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, ClientErrorCount)]:
        logger.removeHandler(old)
    handler = ClientErrorCount(errors)
    logger.addHandler(handler)
    return handler

