"""The topics a worker uses and the one way to create them (with the settings' SASL/TLS).

Faust does not create source topics, and a broker may auto-create them with another partition
count, so the worker (``pufferfish run``), the demo and the tests all create topics here first.
The releases and priors topics (and with release_mechanism=tree the node journal) are
journals: infinite retention, never compacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from pufferfish_core.errors import PufferfishError
from stream_app.kafka.clients import UNREACHABLE_HINT, aiokafka_kwargs
from stream_app.settings import Settings

TOPIC_ALREADY_EXISTS = 36  # Kafka error code
JOURNAL_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}


class TopicSetupError(PufferfishError, RuntimeError):
    """A topic was refused, is missing after creation, or has the wrong partition count."""


def wanted_topics(settings: Settings) -> dict[str, int]:
    """Every topic of a worker and its partition count (the one topic list)."""
    s = settings
    return {
        s.topic_reports: s.input_partitions,
        s.topic_membership: s.input_partitions,
        s.topic_partials: 1,
        s.topic_releases: 1,
        s.topic_priors: 1,
        s.topic_deadletter: 1,
        **({s.topic_tree_nodes: 1} if s.release_mechanism == "tree" else {}),
    }


def journal_topics(settings: Settings) -> frozenset[str]:
    return frozenset({settings.topic_releases, settings.topic_priors, settings.topic_tree_nodes})


async def _existing(admin: AIOKafkaAdminClient) -> dict[str, int]:
    """Partition count of every topic (asks for all topics: never auto-creates one)."""
    return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(None)}


async def create_topics(
    client: Mapping[str, Any],
    topics: Mapping[str, int],
    journals: frozenset[str] = frozenset(),
    settle_seconds: float = 10.0,
) -> None:
    """Create the missing ``topics`` ({name: partitions}) with aiokafka admin kwargs ``client``;
    existing ones must have that partition count. TopicSetupError names the topic otherwise."""
    for name, partitions in topics.items():
        if not name or partitions < 1:
            raise TopicSetupError(
                f"topic {name!r}: need a name and partitions >= 1, got {partitions}")
    admin = AIOKafkaAdminClient(**client, request_timeout_ms=10_000)
    try:
        await admin.start()
        missing = [n for n in topics if n not in await _existing(admin)]
        if missing:
            response = await admin.create_topics([
                NewTopic(n, topics[n], replication_factor=1,
                         topic_configs=dict(JOURNAL_CONFIG) if n in journals else {})
                for n in missing
            ])
            for name, code, *_ in response.topic_errors:
                if code not in (0, TOPIC_ALREADY_EXISTS):
                    raise TopicSetupError(
                        f"topic {name!r}: broker refused creation (Kafka error {code})")
        deadline = time.monotonic() + settle_seconds
        while True:
            existing = await _existing(admin)
            wrong = {n: existing.get(n) for n, p in topics.items() if existing.get(n) != p}
            if not wrong:
                return
            # a topic that exists with another count will never fix itself: fail at once
            if any(c is not None for c in wrong.values()) or time.monotonic() > deadline:
                raise TopicSetupError("topic partition check failed: " + ", ".join(
                    f"{n!r} has {c} partitions, expected {topics[n]}" if c is not None
                    else f"{n!r} missing after creation" for n, c in wrong.items()))
            await asyncio.sleep(0.1)
    finally:
        try:
            await admin.close()
        except Exception:  # noqa: BLE001 - closing a half-started client must not mask errors
            pass


async def ensure_topics(settings: Settings, timeout: float = 30.0,
                        shown: float | None = None) -> None:
    """Create every topic of the worker, retrying while the broker is not reachable yet, at
    most ``timeout`` seconds (each attempt is bounded by what is left; ``shown``: the bound the
error names, when the caller's started earlier). aiokafka's log line per
    refused connection is withheld meanwhile: the one error is ours."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    with quiet_connection_errors():
        while (left := deadline - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(create_topics(
                    aiokafka_kwargs(settings), wanted_topics(settings), journal_topics(settings)),
                    left)
                return
            except TopicSetupError:
                raise
            except (TimeoutError, Exception) as exc:  # noqa: BLE001 - not up yet: retry
                last = exc
            await asyncio.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
    why = f" ({type(last).__name__})" if last is not None else ""
    raise TopicSetupError(f"broker: {settings.broker} not reachable in {shown or timeout:g} s"
                          f"{why}: {UNREACHABLE_HINT}")


@contextlib.contextmanager
def quiet_connection_errors() -> Iterator[None]:
    """aiokafka logs every refused connection at ERROR: withheld while this runs."""
    logger = logging.getLogger("aiokafka")
    before = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(before)
