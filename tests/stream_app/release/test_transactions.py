"""Releases published in one transaction per tick, on Apache Kafka (issue 46; docs/design.md,
"Fences"): two real releasers in one process, the second claiming the releaser's transactional
id at the exact point where a SIGSTOPped owner would be overtaken (after the first one's journal
fence, before its send or its commit). On tansu (no transactions): at-least-once, said once,
and ``required`` refuses to start."""

from __future__ import annotations

import asyncio
import gc
import logging
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.domain.models import Partial, Release, to_bytes
from stream_app.domain.priors import public_priors
from stream_app.metrics import Metrics
from stream_app.release import Releaser
from stream_app.release.delivery import TransactionsUnavailable
from stream_app.release.publisher import Publisher
from stream_app.settings import Settings
from tests.kafka_broker import KafkaBroker
from tests.release_views import VIEWS, read_view, twice

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kafka"),
              pytest.mark.timeout(180)]

# X = 8 * 2**-2 = 2; value_presence on {0, 1, 2}: theta 2, charge 1 per release
PARTS = {0: Partial(partition=0, sum_units=8, newest_ts=1.0)}
HOLD = 1.0  # a fenced owner's hold: broker_session_timeout (no consumer group here)


def settings(url: str, data_dir: Path, prefix: str, **kw: object) -> Settings:
    base: dict[str, object] = dict(
        broker=url, domain=[0, 1, 2], epsilon=1.0, grid_log2=-2, metrics_port=None,
        journal_quiet_seconds=0.3, pairs=["value_presence"], data_dir=data_dir,
        budget_total=100.0, app_id=f"{prefix}-app", topic_releases=f"{prefix}-releases",
        topic_priors=f"{prefix}-priors", topic_tree_nodes=f"{prefix}-nodes",
        broker_session_timeout=HOLD, learn_period_seconds=86400.0,
    )
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def releaser(s: Settings) -> Releaser:
    return Releaser(s, Metrics.create(), public_priors(s), lambda: PARTS, lambda: True)


async def two_owners(broker: KafkaBroker, tmp: Path,
                     **kw: object) -> tuple[Settings, Releaser, Releaser]:
    """Two workers of one deployment (one transactional id, one set of journals), with the
    journals created: ``a`` and ``b`` contend for the release role."""
    prefix = f"tx-{uuid.uuid4().hex[:8]}"
    s_a, s_b = (settings(broker.url, tmp / n, prefix, **kw) for n in "ab")
    await create_topics(broker.bootstrap, {s_a.topic_releases: 1, s_a.topic_priors: 1})
    return s_a, releaser(s_a), releaser(s_b)


def overtaken_before_send(a: Releaser, b: Releaser, topic: str, box: list[object]) -> None:
    """``a``'s first send to ``topic`` waits until ``b`` has published a tick of its own (b
    claims the transactional id, reads the journals, publishes): a frozen owner resuming."""
    send = a.publisher.send

    async def overtaken(to: str, payload: bytes) -> bool:
        if to == topic and not box:
            box.append(await b.release_once())
        return await send(to, payload)

    a.publisher.send = overtaken  # type: ignore[method-assign,assignment]


async def views(bootstrap: str, topic: str) -> dict[str, list[dict[str, object]]]:
    return {v: await read_view(bootstrap, topic, v) for v in VIEWS}


async def _fenced(broker: KafkaBroker, tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    s_a, a, b = await two_owners(broker, tmp)
    try:
        r1 = await a.release_once()
        assert r1 is not None and r1.seq == 1 and a.publisher.transactional
        assert r1.tick is not None
        box: list[object] = []
        overtaken_before_send(a, b, s_a.topic_releases, box)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="stream_app"):
            assert await a.release_once() is None  # fenced: nothing of its tick is published
        r2 = box[0]
        assert isinstance(r2, Release) and (r2.seq, r2.tick) == (2, r1.tick + 1)
        said = [(r.levelname, r.getMessage()) for r in caplog.records
                if r.levelno >= logging.WARNING]
        assert len(said) == 1 and said[0][0] == "WARNING", said
        assert "release owner fenced" in said[0][1] and s_a.transactional_id in said[0][1]
        assert a.pause.holding() and not a.synced  # stepped down
        r3 = None
        while r3 is None:  # after the hold, a claims the id again and continues after b
            await asyncio.sleep(0.1)
            r3 = await a.release_once()
        # its drawn seq 2 is burned (charged on its books, never published): seq 3, tick 3
        assert (r3.seq, r3.tick) == (3, r1.tick + 2) and r3.epsilon_spent >= 3.0
        assert await b.release_once() is None  # b's fence sees a's seq 3
    finally:
        await a.stop()
        await b.stop()
    for view, journal in (await views(broker.bootstrap, s_a.topic_releases)).items():
        assert [r["seq"] for r in journal] == [1, 2, 3], view
        assert twice(journal, "tick") == [] and twice(journal, "seq") == [], view


def test_a_new_owner_fences_the_old_one_between_its_fence_and_its_send(
        kafka_broker: KafkaBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_fenced(kafka_broker, tmp_path, caplog))


async def _aborted_counts(broker: KafkaBroker, tmp: Path) -> None:
    """An owner's release reached the log, its commit did not happen (it froze, or died):
    the new owner's claim aborts the transaction, and the record still counts as published
    (a reader of uncommitted records has it): its tick is not published again, its seq and
    charge are not reused."""
    s_a, a, b = await two_owners(broker, tmp)
    try:
        r1 = await a.release_once()
        assert r1 is not None
        r2 = r1.model_copy(update=dict(seq=2, tick=a.next_tick(), epsilon_spent=2.0))
        assert await a.publisher.begin()
        assert await a.publisher.send(s_a.topic_releases, to_bytes(r2))  # in the log, open
        r3 = await b.release_once()  # claims (aborts a's transaction), reads, publishes
        assert r3 is not None and r2.tick is not None and (r3.seq, r3.tick) == (3, r2.tick + 1)
        assert r3.epsilon_spent == 3.0  # r2's charge is counted
        assert not await a.publisher.end(commit=True)  # fenced
    finally:
        await a.stop()
        await b.stop()
    got = await views(broker.bootstrap, s_a.topic_releases)
    assert [r["seq"] for r in got["read_committed"]] == [1, 3]  # a gap, never a second value
    assert [r["seq"] for r in got["read_uncommitted"]] == [1, 2, 3]
    assert twice(got["read_uncommitted"], "tick") == []


def test_a_release_in_the_log_counts_even_when_its_transaction_is_aborted(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    asyncio.run(_aborted_counts(kafka_broker, tmp_path))


async def _round_and_release(broker: KafkaBroker, tmp: Path) -> None:
    """A tick's learning round and release are one transaction: an owner overtaken between
    them publishes neither (its round's records are in the log, aborted: the new owner counts
    them), and an owner not overtaken publishes both at once."""
    s_a, a, b = await two_owners(broker, tmp, learn_period_seconds=1.0,
                                 release_period_seconds=1.0, epsilon_learn=0.5,
                                 learn_min_mass=0.0)
    try:
        tick = a.next_tick()
        box: list[object] = []
        overtaken_before_send(a, b, s_a.topic_releases, box)
        assert await a.on_clock(tick) is None  # its round went out, then b took over
        by_b = box[0]
        # b counted a's round (in the log, aborted): its own release charges after it
        assert isinstance(by_b, Release) and by_b.seq == 1 and by_b.tick == tick
        assert by_b.epsilon_spent == pytest.approx(0.5 + 1.0)
        assert by_b.priors_seq == 1  # the round's laws: in the log, so in force
        r = await b.on_clock(tick + 1)  # b's own round and release, one transaction
        assert r is not None and r.priors_seq == 2 and r.tick == tick + 1
    finally:
        await a.stop()
        await b.stop()
    releases = await views(broker.bootstrap, s_a.topic_releases)
    priors = await views(broker.bootstrap, s_a.topic_priors)
    assert [(x["seq"], x["tick"]) for x in releases["read_committed"]] == [(1, tick),
                                                                           (2, tick + 1)]
    assert {x["seq"] for x in priors["read_committed"]} == {2}  # a's round: aborted
    assert {x["seq"] for x in priors["read_uncommitted"]} == {1, 2}
    assert releases["read_uncommitted"] == releases["read_committed"]


def test_a_learning_round_and_its_release_are_one_transaction(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    asyncio.run(_round_and_release(kafka_broker, tmp_path))


async def _on_tansu(broker: EmbeddedBroker, tmp: Path, caplog: pytest.LogCaptureFixture,
                    check: Callable[[Releaser], Awaitable[None]], mode: str) -> None:
    prefix = f"tx-{uuid.uuid4().hex[:8]}"
    s = settings(broker.url, tmp, prefix, release_transactions=mode)
    await create_topics(broker.bootstrap, {s.topic_releases: 1, s.topic_priors: 1})
    r = releaser(s)
    try:
        await check(r)
    finally:
        await r.stop()


def test_without_transactions_releases_are_at_least_once_and_say_it_once(
        broker: EmbeddedBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def check(r: Releaser) -> None:
        with caplog.at_level(logging.INFO):
            await r.publisher.delivery.announce()
            got = [await r.release_once() for _ in range(3)]
        assert [x.seq for x in got if x is not None] == [1, 2, 3]
        assert r.publisher.delivery.transactional is False
        said = [x.getMessage() for x in caplog.records if x.levelno >= logging.WARNING]
        assert len(said) == 1, said
        assert said[0].startswith("releases are at-least-once: the broker has no transactions "
                                  "(InitProducerId: UnknownError)"), said

    asyncio.run(_on_tansu(broker, tmp_path, caplog, check, "auto"))


def test_required_transactions_refuse_a_broker_without_them(
        broker: EmbeddedBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def check(r: Releaser) -> None:
        with pytest.raises(TransactionsUnavailable, match="^release_transactions: required, "):
            await r.publisher.delivery.announce()
        assert await r.release_once() is None  # learned again by the claim: nothing published
        assert r.publisher.delivery.transactional is None

    asyncio.run(_on_tansu(broker, tmp_path, caplog, check, "required"))


async def _dropped_then_fenced(broker: KafkaBroker, tmp: Path) -> list[str]:
    """``a``'s producer is dropped while its send is in flight and a newer producer of the id
    has fenced it at the broker: the fence reaches its sender during (or after) the stop."""
    prefix = f"tx-{uuid.uuid4().hex[:8]}"
    s = settings(broker.url, tmp, prefix)
    await create_topics(broker.bootstrap, {s.topic_releases: 1})
    loop = asyncio.get_running_loop()
    unretrieved: list[str] = []
    loop.set_exception_handler(lambda _, context: unretrieved.append(
        f"{context['message']}: {context.get('exception')!r} {context.get('future')!r}"))
    a, b = Publisher(s, Metrics.create()), Publisher(s, Metrics.create())
    await a.claim()
    await b.claim()  # InitProducerId: a's producer is fenced, it does not know yet
    try:
        assert await a.begin()
        sending = asyncio.create_task(a.send(s.topic_releases, b"{}"))
        await asyncio.sleep(0.01)  # the AddPartitionsToTxn request is on its way
        await a.stop()
        assert await sending is False
    finally:
        await b.stop()
    del a, sending
    for _ in range(3):
        gc.collect()
        await asyncio.sleep(0.1)
    return unretrieved


def test_a_producer_dropped_before_its_fence_arrives_leaves_nothing_unretrieved(
        kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    assert asyncio.run(_dropped_then_fenced(kafka_broker, tmp_path)) == []
