"""The project's consumers read committed records only (issue 44): `pufferfish tail`, on Apache
Kafka, over a topic holding a committed, an aborted and a committed transaction; the worker's
Faust consumer: tests/reliability/test_aborted_transactions.py. Except the release owner's own
journal reader (stream_app/release/journal.py, issue 46): whatever reached the log of releases,
priors or tree nodes counts as published, aborted or not (a reader may read uncommitted)."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from pydantic import BaseModel

from stream_app.demo.broker_admin import create_topics
from stream_app.release.journal import read_journal
from stream_app.settings import Settings
from stream_app.tools import tail
from tests.kafka_broker import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("kafka")]


class Entry(BaseModel):
    n: int


def _journal_with_an_abort(broker: KafkaBroker) -> str:
    """A 1-partition topic: {"n": 1} committed, {"n": 2} aborted, {"n": 3} committed."""
    topic = f"rc-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topics(broker.bootstrap, {topic: 1}))
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"rc-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    for n, commit in ((1, True), (2, False), (3, True)):
        producer.begin_transaction()
        producer.produce(topic, value=json.dumps({"n": n}).encode(), partition=0)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.flush(60)  # in the log before the abort marker
            producer.abort_transaction(60)
    return topic


def test_the_journal_reader_counts_aborted_records(kafka_broker: KafkaBroker,
                                                   tmp_path: Path) -> None:
    topic = _journal_with_an_abort(kafka_broker)
    settings = Settings(broker=kafka_broker.url, data_dir=tmp_path, metrics_port=None,
                        journal_quiet_seconds=0.3)
    got = asyncio.run(read_journal(settings, topic, Entry))
    assert [e.n for e in got] == [1, 2, 3]  # n=2 was aborted: still in the log


def test_tail_skips_aborted_records(kafka_broker: KafkaBroker, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    topic = _journal_with_an_abort(kafka_broker)
    monkeypatch.setenv("PUFFERFISH_TOPIC_RELEASES", topic)
    monkeypatch.chdir(tmp_path)
    assert tail.main(["--broker", kafka_broker.url, "--json", "--from-beginning",
                      "--topics", "releases", "--max", "2", "--timeout", "30"]) == 0
    # read_uncommitted would print n=1, then the aborted n=2
    assert [json.loads(line)["n"] for line in capsys.readouterr().out.splitlines()] == [1, 3]
