"""Both journals of the release agent (``releases`` and ``priors``, one partition each) and
what this worker itself sent to them since it last read them (docs/design.md, "Release
durability": the journal fence)."""

from __future__ import annotations

import asyncio
import logging

from stream_app.domain.models import PriorsRecord, Release
from stream_app.kafka.clients import aiokafka_kwargs
from stream_app.kafka.topics import create_topics, journal_topics
from stream_app.release.journal import Journal, bounded
from stream_app.settings import Settings

log = logging.getLogger(__name__)


class Journals:
    def __init__(self, settings: Settings) -> None:
        self.settings = s = settings
        self.releases = Journal(s, s.topic_releases, Release)
        self.priors = Journal(s, s.topic_priors, PriorsRecord)
        self._own: set[tuple[str, int, float]] = set()  # (topic, seq, ts) sent since the read

    async def read_all(self) -> tuple[list[Release], list[PriorsRecord]]:
        """Every record of both journals (created first with one partition: a broker that lost
        its topics would otherwise auto-create them with its default count).

        Both are read at once: each read waits ``journal_quiet_seconds`` of quiet after its end,
        and one after the other a takeover waited for both (docs/operations.md, "Failover").
        Nothing is used before both reads are complete, and either failing fails the sync."""
        s = self.settings
        log.info("reading the releases and priors journals")
        await bounded(create_topics(aiokafka_kwargs(s), {s.topic_releases: 1, s.topic_priors: 1},
                                    journal_topics(s)), "journal topics")
        reads = (asyncio.ensure_future(self.releases.read_all()),
                 asyncio.ensure_future(self.priors.read_all()))
        try:
            releases, priors = await asyncio.gather(*reads)
        except BaseException:
            for read in reads:  # a read left running would share its consumer with the retry
                read.cancel()
            await asyncio.gather(*reads, return_exceptions=True)
            raise
        self._own.clear()
        return releases, priors

    def sent(self, topic: str, seq: int, ts: float) -> None:
        """A record this worker is about to send (not foreign when it comes back)."""
        self._own.add((topic, seq, ts))

    async def foreign(self) -> list[Release | PriorsRecord]:
        """The records published since the last read that this worker did not send."""
        found: list[Release | PriorsRecord] = []
        for journal in (self.releases, self.priors):
            topic = journal.tp.topic
            found += [r for r in await journal.drain() if (topic, r.seq, r.ts) not in self._own]
        return found

    async def close(self) -> None:
        await self.releases.close()
        await self.priors.close()
