"""The node journal in Kafka (stream_app/release/tree_nodes.py) on a real broker (tansu): a new
owner continues the same tree from the topic, each node is in the topic once, a failed append
raises and nothing of it is used."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.metrics import Metrics
from stream_app.release.journal import JournalError, read_journal
from stream_app.release.publisher import Publisher
from stream_app.release.tree import WindowTree
from stream_app.release.tree_nodes import KafkaNodeJournal, NodeRecord
from stream_app.settings import Settings
from tests.stream_app.release.test_tree import TICKS, exact, mechanism

pytestmark = pytest.mark.integration


async def _continues(broker: EmbeddedBroker, data_dir: Path) -> None:
    # tansu has no transactions: the publisher sends at least once (no claim first)
    s = Settings(broker=broker.url, metrics_port=None, journal_quiet_seconds=0.3,
                 data_dir=data_dir, release_mechanism="tree", budget_window_seconds=60,
                 release_transactions="off")
    await create_topics(broker.bootstrap, {s.topic_tree_nodes: 1})
    m = mechanism()
    owners = []
    for ticks in (range(0, 9), range(5, TICKS)):  # an owner, then a new one after it
        metrics = Metrics.create()
        journal = KafkaNodeJournal(s, metrics, Publisher(s, metrics))
        tree = WindowTree(m, 3, journal)
        owners.append([await tree.release(t, exact(t)) for t in ticks])
        await journal.publisher.stop()
        await journal.close()
    records = await read_journal(s, s.topic_tree_nodes, NodeRecord)
    counts = Counter(r.node for r in records)
    assert counts and max(counts.values()) == 1  # no node drawn twice
    noise = {r.node: r.units for r in records}
    assert {r.window for r in records} == {3}
    for r in owners[0] + owners[1]:
        assert r.noisy_units == exact(r.tick) + sum(noise[n] for n in r.nodes)
    before = {r.tick: r.noisy_units for r in owners[0]}
    assert [r.noisy_units for r in owners[1] if r.tick in before] == \
        [before[t] for t in range(5, 9)]  # the same releases again: the same noise

    metrics = Metrics.create()
    gone = Settings(**{**s.model_dump(), "broker": "kafka://127.0.0.1:9"})
    journal = KafkaNodeJournal(gone, metrics, Publisher(gone, metrics))
    journal._read = []  # noqa: SLF001 - the topic as read: empty (the append is what fails)
    tree = WindowTree(m, 4, journal)
    tree.synced = True
    with pytest.raises(JournalError):
        await tree.release(0, exact(0))
    assert tree.drawn == {} and not tree.synced
    await journal.publisher.stop()
    await journal.close()


def test_a_new_owner_continues_the_tree_from_the_topic(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    import asyncio

    asyncio.run(_continues(broker, tmp_path))
