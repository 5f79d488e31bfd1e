"""Both journals of the release agent are read at once on a real broker: a new owner waits one
``journal_quiet_seconds`` after the journals' ends, not one per journal (docs/operations.md,
"Failover"), and a read that fails stops the other, whose consumer is closed (it would otherwise
be shared with the retry's read)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.release.journal import Journal, JournalError
from stream_app.release.journals import Journals
from tests.stream_app.release.test_releaser import settings

pytestmark = pytest.mark.integration

QUIET = 1.0


def spy(journal: Journal[Any], log: list[tuple[str, str, float]],
        read: Callable[[], Awaitable[list[Any]]] | None = None) -> None:
    """Records (topic, "start" | "end" | "cancelled" | "failed", monotonic time) of each read."""
    inner = read or journal.read_all
    topic = journal.tp.topic

    async def read_all() -> list[Any]:
        log.append((topic, "start", time.monotonic()))
        try:
            out = await inner()
        except asyncio.CancelledError:
            log.append((topic, "cancelled", time.monotonic()))
            raise
        except Exception:
            log.append((topic, "failed", time.monotonic()))
            raise
        log.append((topic, "end", time.monotonic()))
        return out

    journal.read_all = read_all  # type: ignore[method-assign]


async def _at_once(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp, ("releases", "priors"), journal_quiet_seconds=QUIET)
    journals = Journals(s)
    log: list[tuple[str, str, float]] = []
    spy(journals.releases, log)
    spy(journals.priors, log)
    try:
        assert await journals.read_all() == ([], [])
    finally:
        await journals.close()
    starts = [t for _, what, t in log if what == "start"]
    ends = [t for _, what, t in log if what == "end"]
    assert len(starts) == len(ends) == 2, log
    assert max(starts) < min(ends), log  # both in flight together
    assert min(ends) - min(starts) >= QUIET  # each waited its quiet time (not skipped)


def test_both_journals_are_read_at_once(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_at_once(broker, tmp_path))


async def _failure(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp, ("releases", "priors"), journal_quiet_seconds=QUIET)
    journals = Journals(s)
    log: list[tuple[str, str, float]] = []

    async def broken() -> list[Any]:
        await asyncio.sleep(0.2)  # the releases read is running by then (its quiet: 1 s)
        raise JournalError("priors: no answer")

    spy(journals.releases, log)
    spy(journals.priors, log, broken)
    try:
        with pytest.raises(JournalError, match="priors: no answer"):
            await journals.read_all()
        assert [(topic, what) for topic, what, _ in log if what != "start"] == [
            (s.topic_priors, "failed"), (s.topic_releases, "cancelled")]
        assert journals.releases._consumer is None  # closed: the retry reads with a new one
    finally:
        await journals.close()


def test_a_failed_journal_read_stops_the_other(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_failure(broker, tmp_path))
