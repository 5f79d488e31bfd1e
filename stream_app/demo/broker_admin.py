"""Admin calls to the embedded broker: readiness, topic partitions, topic creation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from aiokafka.admin import AIOKafkaAdminClient

from pufferfish_core.errors import PufferfishError
from stream_app.kafka.topics import TopicSetupError
from stream_app.kafka.topics import create_topics as _create_topics


class BrokerError(PufferfishError, RuntimeError):
    """The embedded broker could not be found, started, or asked to create topics."""


async def wait_ready(bootstrap: str, timeout: float = 30.0) -> None:
    """Return once a metadata round trip to `bootstrap` works; BrokerError after `timeout` s."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    host, _, port = bootstrap.rpartition(":")
    while time.monotonic() < deadline:
        # A plain TCP probe first: aiokafka logs an ERROR for every refused connection.
        if not await _accepts_connections(host, int(port)):
            await asyncio.sleep(0.05)
            continue
        try:
            admin = await _admin(bootstrap)
        except Exception as exc:  # noqa: BLE001 - not up yet: retry until the deadline
            last = exc
        else:
            try:
                await admin.list_topics()
                return
            except Exception as exc:  # noqa: BLE001
                last = exc
            finally:
                await _close_quietly(admin)
        await asyncio.sleep(0.1)
    raise BrokerError(f"broker at {bootstrap} not ready after {timeout:g} s (last error: {last!r})")


async def topic_partitions(bootstrap: str) -> dict[str, int]:
    """Partition count of every existing topic (asks for all topics: never auto-creates one)."""
    admin = await _admin(bootstrap)
    try:
        topics = await admin.describe_topics(None)
    finally:
        await _close_quietly(admin)
    return {t["topic"]: len(t["partitions"]) for t in topics}


async def create_topics(bootstrap: str, topics: Mapping[str, int]) -> None:
    """stream_app.kafka.topics.create_topics on a plaintext broker; BrokerError naming the topic."""
    try:
        await _create_topics({"bootstrap_servers": bootstrap}, topics)
    except TopicSetupError as exc:
        raise BrokerError(str(exc)) from None



async def _admin(bootstrap: str, request_timeout_ms: int = 2000) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=request_timeout_ms)
    try:
        await admin.start()
    except BaseException:
        await _close_quietly(admin)
        raise
    return admin



async def _accepts_connections(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    try:
        await writer.wait_closed()
    except OSError:
        pass
    return True



async def _close_quietly(admin: AIOKafkaAdminClient) -> None:
    try:
        await admin.close()
    except Exception:  # noqa: BLE001 - closing a half-started client must not mask the real error
        pass
