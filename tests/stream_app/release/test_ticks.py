"""The public clock on a real broker, without Faust: every tick published once and in order,
a takeover continues after the journal's last tick and never learns a round twice, a late
tick keeps its window, and the release lag is read on the worker's clock
(docs/privacy.md, "The public clock")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from pufferfish_core.plan import learning_due
from stream_app.demo.broker import EmbeddedBroker
from stream_app.domain.models import Partial, PriorsRecord, Release
from stream_app.release.journal import read_journal
from stream_app.release.schedule import run_clock
from tests.stream_app.release.test_releaser import partial, running, settings

pytestmark = pytest.mark.integration

YEAR = 365 * 86400.0


def sample(r: object, name: str) -> float:
    value = r.metrics.registry.get_sample_value(name)  # type: ignore[attr-defined]
    return 0.0 if value is None else float(value)


async def _takeover(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp / "a", ("releases", "priors"), epsilon_learn=0.5,
                       budget_total=100.0, learn_min_mass=0.0, release_period_seconds=1.0,
                       learn_period_seconds=2.0)
    parts = {0: partial(0, 4, {"default": [0, 2**16, 0]})}
    async with running(s, parts) as a:
        k = a.next_tick() | 1  # odd: rounds are due on even ticks (one every 2 s)
        assert all(learning_due(t, 1.0, 2.0) == (t % 2 == 0) for t in range(k, k + 6))
        got = [await a.on_clock(t) for t in (k, k + 1, k + 2)]
        assert [r.tick for r in got if r] == [k, k + 1, k + 2]
        # the owner learns tick k+3's round, then dies before that tick's release
        round_ = await a.learn_once()
        assert round_ is not None and round_[0].tick == k + 3
    s_b = s.model_copy(update={"data_dir": tmp / "b"})
    async with running(s_b, parts) as b:
        assert await b.on_clock(k + 1) is None  # published already: nothing to do
        assert b.next_tick() == k + 3  # the first tick after the journal's last one
        third = await b.on_clock(b.next_tick())  # its round is in the journal: release only
        assert third is not None and third.tick == k + 3 and third.priors_seq == 2
        rest = [await b.on_clock(b.next_tick()) for _ in range(2)]
        assert [r.tick for r in rest if r] == [k + 4, k + 5]
    releases = await read_journal(s, s.topic_releases, Release)
    rounds = await read_journal(s, s.topic_priors, PriorsRecord)
    assert [r.tick for r in releases] == list(range(k, k + 6))
    assert [r.seq for r in releases] == list(range(1, 7))
    # exactly the rounds due for the elapsed ticks, each once, whoever owned the tick
    assert [(p.seq, p.tick) for p in rounds] == [(1, k + 1), (2, k + 3), (3, k + 5)]
    # G·R·β so far: 1 group x R rounds x beta 1e-6
    assert [(r.learning_rounds, r.failure_probability) for r in releases] == [
        (0, 0.0), (1, 1e-6), (1, 1e-6), (2, 2e-6), (2, 2e-6), (3, 3e-6)]


def test_a_takeover_continues_after_the_last_published_tick_and_never_learns_twice(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_takeover(broker, tmp_path))


async def _queued(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp, ("releases",), budget_total=100.0)
    async with running(s, {0: partial(0, 8)}) as r:
        k = r.next_tick()
        # three ticks at once (a catch-up, a slow tick): they queue on the lock, none dropped
        got = await asyncio.gather(*(r.on_clock(t) for t in (k, k + 1, k + 2)))
        assert [x.tick for x in got if x] == [k, k + 1, k + 2]
        assert await r.on_clock(k + 1) is None  # and none is published twice
    assert [x.tick for x in await read_journal(s, s.topic_releases, Release)] == [k, k + 1, k + 2]


def test_ticks_that_come_together_queue_and_are_all_published(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_queued(broker, tmp_path))


async def _late_window(broker: EmbeddedBroker, tmp: Path) -> None:
    # charge 1 per release (value_presence on {0, 1, 2}), budget 1.5 a window of 60 ticks
    s = await settings(broker, tmp, ("releases",), budget_total=1.5, budget_window_seconds=60.0,
                       release_period_seconds=1.0)
    async with running(s, {0: partial(0, 8)}) as r:
        now_tick = r.next_tick()
        old = (now_tick // 60 - 2) * 60 + 5  # a tick of the window before last
        r.ticks.cursor = old  # as if this worker had started then, and ran late ever since
        late = await r.on_clock(old)
        assert late is not None and late.window == old // 60  # its due time's window
        assert late.ts - late.tick >= 60  # type: ignore[operator]  # published > 60 s late
        assert await r.on_clock(old + 1) is None  # same window: 1 + 1 > 1.5, skipped for good
        assert r.next_tick() == old + 2
        # a later window renews the budget; not on a learning tick (learn_period_seconds 60:
        # a round at every multiple of 60, epoch-aligned), whose round would spend 0.1 first
        fresh_tick = now_tick + 1 if now_tick % 60 == 0 else now_tick
        fresh = await r.on_clock(fresh_tick)
        assert fresh is not None and fresh.window == now_tick // 60
        assert fresh.epsilon_spent == 1.0
        lateness = sample(r, "pufferfish_release_tick_lateness_seconds_sum")
        assert lateness >= 60
    windows = [(x.tick, x.window) for x in await read_journal(s, s.topic_releases, Release)]
    assert windows == [(old, old // 60), (fresh_tick, now_tick // 60)]


def test_the_window_of_a_late_tick_is_that_of_its_due_time(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_late_window(broker, tmp_path))


async def _lag(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp, ("releases",), budget_total=100.0)
    parts: dict[int, Partial] = {}
    async with running(s, parts) as r:
        # consumed before this worker started: earlier releases may hold it, nothing to observe
        parts[0] = Partial(partition=0, sum_units=4, newest_ts=1.0, consumed_at=time.time() - 30)
        assert await r.release_once() is not None
        assert sample(r, "pufferfish_release_lag_seconds_count") == 0
        # a report whose ts is a year old, consumed now: the lag is the worker's, not a year
        consumed = time.time()
        parts[1] = Partial(partition=1, sum_units=4, newest_ts=consumed - YEAR,
                           consumed_at=consumed)
        got = await r.release_once()
        assert got is not None
        assert sample(r, "pufferfish_release_lag_seconds_count") == 1
        lag = sample(r, "pufferfish_release_lag_seconds_sum")
        assert 0 <= lag <= got.ts - consumed + 1e-6 and lag < 5
        for _ in range(3):  # silence: the releases include nothing new, nothing is observed
            assert await r.release_once() is not None
        assert sample(r, "pufferfish_release_lag_seconds_count") == 1


def test_the_release_lag_is_read_on_the_worker_clock_and_only_for_new_records(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_lag(broker, tmp_path))


async def _scheduled(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp, ("releases",), budget_total=1e6,
                       release_period_seconds=0.2)

    async def hog() -> None:
        """Blocks the event loop 0.5 s every 1 s (a batch of input work): ticks come late."""
        while True:
            await asyncio.sleep(1.0)
            time.sleep(0.5)

    async with running(s, {0: partial(0, 8)}) as r:
        first = r.next_tick()
        clock, blocker = asyncio.create_task(run_clock(r)), asyncio.create_task(hog())
        deadline = time.monotonic() + 90  # bounds a failure only
        while r.next_tick() < first + 20 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # 20 ticks of 0.2 s, some of them blocked by the hog
        for task in (blocker, clock):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        last = r.next_tick() - 1
        registry = r.metrics.registry
        published = registry.get_sample_value("pufferfish_release_tick_lateness_seconds_count")
        on_time = registry.get_sample_value("pufferfish_release_tick_lateness_seconds_bucket",
                                            {"le": "0.25"})
        assert published is not None and on_time is not None
        assert on_time < published  # the blocked ticks were published late, not dropped
    ticks = [x.tick for x in await read_journal(s, s.topic_releases, Release)]
    assert ticks == list(range(first, last + 1))  # every tick once, in order, no gap
    assert len(ticks) >= 20


def test_the_scheduler_publishes_every_tick_late_rather_than_dropping_it(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_scheduled(broker, tmp_path))


async def _takeover_window(broker: EmbeddedBroker, tmp: Path) -> None:
    s = await settings(broker, tmp / "a", ("releases",), budget_total=10.0,
                       budget_window_seconds=60.0, release_period_seconds=1.0)
    parts = {0: partial(0, 8)}
    async with running(s, parts) as a:
        start = a.next_tick() // 60 * 60  # the first tick of this window
        a.ticks.cursor = start
        got = [await a.on_clock(t) for t in (start, start + 1)]
        # charge 1 a release, and a learning round (epsilon_learn 0.1) at the minute's tick
        assert [x.epsilon_spent for x in got if x] == [1.1, 2.1]
    async with running(s.model_copy(update={"data_dir": tmp / "b"}), parts) as b:
        b.ticks.cursor = start - 30  # b started in the previous window and never owned
        assert await b.on_clock(b.next_tick()) is None  # the journal has it: published
        third = await b.on_clock(b.next_tick())
        # the budget restored is that of the tick it publishes (this window), not of its start
        assert third is not None and third.tick == start + 2 and third.window == start // 60
        assert third.epsilon_spent == 3.1


def test_a_takeover_restores_the_budget_of_the_window_it_publishes_in(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    asyncio.run(_takeover_window(broker, tmp_path))


async def _becomes_owner(broker: EmbeddedBroker, tmp: Path, monkeypatch: pytest.MonkeyPatch
                         ) -> None:
    """A takeover: the clock tries the due tick as soon as the worker owns the releases, not
    after the retry delay (30 s here: RETRY_SECONDS patched, the period 60 s)."""
    from stream_app.release import schedule

    monkeypatch.setattr(schedule, "RETRY_SECONDS", 30.0)
    s = await settings(broker, tmp, ("releases",), budget_total=1e6,
                       release_period_seconds=60.0)
    owner = {"yes": False}
    async with running(s, {0: partial(0, 8)}, lambda: owner["yes"]) as r:
        r.ticks.cursor -= 1  # this minute's tick: due already (a dead owner's)
        due = r.next_tick()
        clock = asyncio.create_task(run_clock(r, lambda: owner["yes"]))
        try:
            await asyncio.sleep(0.5)  # tried once (not the owner), now waiting to retry
            assert r.next_tick() == due
            owner["yes"], became = True, time.monotonic()
            while r.next_tick() == due and time.monotonic() - became < 20:
                await asyncio.sleep(0.05)
            took = time.monotonic() - became
        finally:
            clock.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await clock
    # the journals read (quiet 0.3 s) and the release sent, far within the 30 s retry
    assert took < 10, took
    assert [x.tick for x in await read_journal(s, s.topic_releases, Release)] == [due]


def test_a_new_owner_releases_its_due_tick_at_once(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_becomes_owner(broker, tmp_path, monkeypatch))
