"""Committed records only, for every record the worker's Faust consumer reads: the input
topics, the tables' changelogs (recovery and standbys) and the partials topic.

Faust builds its aiokafka consumer with ``isolation_level="read_uncommitted"`` unless the
processing guarantee is exactly_once (``AIOKafkaConsumerThread._create_worker_consumer``), and
the worker runs at_least_once (app.py): the records of ABORTED transactions were counted (issue
44, on Apache Kafka: a release of 250 against a committed 49). The worker's consumer thread
(consumer.py, ``TunedConsumerThread``) sets the level on the client Faust built, before it starts.
"""

from __future__ import annotations

from typing import Any

from stream_app.kafka.clients import ISOLATION_LEVEL

LEVELS = ("read_uncommitted", "read_committed")  # what aiokafka accepts


def read_committed(consumer: Any) -> None:
    """Make an aiokafka consumer that is not started yet read committed records only.

    aiokafka keeps the level as given, a string, in ``_isolation_level`` and hands it to the
    Fetcher that ``start()`` builds. A client without that attribute, or already started (an
    aiokafka or Faust upgrade), fails here, at the worker's start, instead of reading
    uncommitted records silently (docs/design.md, "After a Faust, mode or aiokafka upgrade")."""
    level = getattr(consumer, "_isolation_level", None)
    fetcher = getattr(consumer, "_fetcher", "absent")  # None until start() builds it
    if level not in LEVELS or fetcher is not None:
        raise RuntimeError(
            f"cannot make {type(consumer).__qualname__} read committed records only "
            f"(_isolation_level: {level!r}, _fetcher: {fetcher!r}): aiokafka or Faust changed; "
            "see docs/design.md, \"After a Faust, mode or aiokafka upgrade\"")
    consumer._isolation_level = ISOLATION_LEVEL
