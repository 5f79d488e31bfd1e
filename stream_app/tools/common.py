"""What ``send`` and ``tail`` share: one-line errors, quiet Kafka logs, bounded broker calls.

Every broker problem at start-up (refused, no answer, TLS/SASL failure) becomes ONE
``PufferfishInputError("broker", ...)`` naming the broker and, when it cannot be reached, what
to do: the command prints it as ``pufferfish: error: broker: ...`` and exits 2, within
``--timeout`` seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any, TypeVar

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaConnectionError

from pufferfish_core.errors import PufferfishInputError
from stream_app.kafka.aio import within
from stream_app.kafka.clients import UNREACHABLE_HINT
from stream_app.settings import Settings

T = TypeVar("T")
BROKER_FIELD = "broker"  # the setting (--broker, PUFFERFISH_BROKER)
CONNECT = "connect"  # the step of ``bounded`` that reaches the broker
DEFAULT_TIMEOUT = 10.0
EXIT_OK, EXIT_PARTIAL, EXIT_ERROR = 0, 1, 2


def fail(exc: BaseException | str) -> int:
    """Print ``pufferfish: error: <field>: <message>`` on one line; exit status 2."""
    print(f"pufferfish: error: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
    return EXIT_ERROR


def quiet_kafka_logs() -> None:
    """aiokafka logs every refused connection at ERROR: the tools report problems themselves."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)


CLEANUP_GRACE_SECONDS = 3.0


def run_until_interrupted(main: Coroutine[Any, Any, T], exit_code: int = EXIT_OK) -> T | None:
    """Run ``main`` on a fresh event loop; Ctrl-C (SIGINT) cancels it, so its ``finally``
    blocks (bounded client stops) run, and returns None.

    Unlike ``asyncio.run``, the end does not wait without limit for the tasks ``main`` left
    behind: an aiokafka call that a time bound abandoned may ignore cancellation for ever
    (stream_app/kafka/aio.py), and ``asyncio.run`` would then never return. They get
    CLEANUP_GRACE_SECONDS; if one still runs after ``main`` ended normally or by Ctrl-C, the
    process ends at once with ``exit_code`` (stdout/stderr flushed) rather than hang. An error
    of ``main`` is raised as usual.
    """
    loop = asyncio.new_event_loop()
    task = loop.create_task(main)
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    loop.add_signal_handler(signal.SIGINT, interrupt)
    result: T | None = None
    try:
        result = loop.run_until_complete(task)
    except asyncio.CancelledError:
        if not interrupted:
            raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        ended_well = task.done() and (task.cancelled() or task.exception() is None)
        if not _cleaned_up(loop) and ended_well:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code)
        loop.close()
    return result


def _cleaned_up(loop: asyncio.AbstractEventLoop) -> bool:
    """Cancel what is left on ``loop``; False if something still runs after the grace time."""
    rest = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for left in rest:
        left.cancel()
    if rest:
        loop.run_until_complete(asyncio.wait(rest, timeout=CLEANUP_GRACE_SECONDS))
    if any(not t.done() for t in rest):
        return False
    loop.run_until_complete(loop.shutdown_asyncgens())
    return True


def broker_error(settings: Settings, problem: str, step: str = "") -> PufferfishInputError:
    """``broker: <problem> <broker> [(step)]``: what went wrong with which broker; when
    connecting (``step`` "connect"), what to do about it."""
    where = f": {UNREACHABLE_HINT}" if step == CONNECT else f" ({step})" if step else ""
    return PufferfishInputError(BROKER_FIELD, f"{problem} {settings.broker}{where}")


async def bounded(aw: Awaitable[T], seconds: float, settings: Settings, what: str) -> T:
    """Await ``aw`` (the step ``what``, e.g. CONNECT) for at most ``seconds``; a late call
    is cancelled and left behind (aiokafka calls may ignore cancellation on a dead connection).
    Errors name the broker."""
    task = await within(aw, seconds)
    if task is None:
        raise broker_error(settings, f"no answer in {seconds:g} s from", what)
    if task.cancelled():
        raise broker_error(settings, "call cancelled inside the Kafka client for", what)
    exc = task.exception()
    if isinstance(exc, PufferfishInputError):
        raise exc
    if isinstance(exc, KafkaConnectionError):
        raise broker_error(settings, "cannot connect to", what) from None
    if exc is not None:
        raise broker_error(settings, f"{type(exc).__name__} ({exc}) from", what) from None
    return task.result()


async def quietly(aw: Awaitable[object], seconds: float) -> None:
    """Stop a client: bounded, errors ignored (it is being dropped anyway)."""
    task = await within(aw, seconds)
    if task is not None and not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" at exit


async def partition_counts(client_kwargs: Mapping[str, Any], settings: Settings,
                           timeout: float) -> dict[str, int]:
    """Partition count of every topic on the broker (asks for all topics: never auto-creates
    one). Also the reachability check: BROKER_FIELD error after ``timeout`` s."""
    client = AIOKafkaClient(**client_kwargs, request_timeout_ms=int(timeout * 1000))
    try:
        await bounded(client.bootstrap(), timeout, settings, CONNECT)
        cluster = await bounded(client.fetch_all_metadata(), timeout, settings, "metadata")
    finally:
        await quietly(client.close(), timeout)
    return {t: len(cluster.partitions_for_topic(t) or ()) for t in cluster.topics()}
