"""The stage of the recovery benchmarks (bench/recovery.py: one worker restarted;
bench/failover.py: two workers, one SIGKILLed): a broker in the run's own directory, the run's
topics and the workers' settings on them, N users loaded with one report each, and the
tear-down that keeps the run's logs.

One input topic for reports and joins (auto_join: each user is loaded by one report), 4
partitions, exact rule, domain K = 6, one group, a release every second. On tansu each
changelog record goes in its own produce request (``TANSU_EXACT``: its ListOffsets defect).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

from bench.harness import PARTITIONS
from bench.producing import produce_waiting
from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics

DOMAIN = [0, 1, 2, 3, 4, 5]
SETTINGS: dict[str, Any] = {
    "domain": DOMAIN, "pairs": ["value_presence"], "rule": "exact", "budget_total": "1e12",
    "release_period_seconds": "1", "prior_source": "learned", "learn_period_seconds": "86400",
    "auto_join": "true", "groups": ["g"], "log_level": "info",
}
TANSU_EXACT = {"producer_max_batch_size": "1", "producer_linger_seconds": "0"}
# Apache Kafka needs none of tansu's workarounds (bench.harness.TANSU_KNOBS): the worker's own
# rebalance timeout and fetch wait; the session timeout stays at Kafka's minimum, 6 s
KAFKA_DEFAULTS = {"broker_rebalance_timeout": "60", "consumer_fetch_max_wait_seconds": "1.5"}


def produce_users(bootstrap: str, topic: str, first: int, n: int, seed: int) -> int:
    """One report per user ``user-<i>`` for i in [first, first + n), murmur2 partitioning
    (Kafka's Java default: the worker's contract), batched. Returns the sum of their values."""
    from confluent_kafka import Producer

    rng = random.Random(seed)
    total = 0
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "linger.ms": 50, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000, "acks": "all"})
    ts = time.time()
    for i in range(first, first + n):
        user = f"user-{i:07d}"
        v = rng.choice(DOMAIN)
        total += v
        value = json.dumps({"user_id": user, "value": v,
                            "report_id": f"r-{i}", "ts": ts}).encode()
        produce_waiting(producer, topic, user, value)
        if i % 10000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} load records not acknowledged")
    return total


class Broker:
    """noida-db, tansu or Apache Kafka (tests/kafka_broker.py: ``bash scripts/kafka-dist.sh``
    first) on loopback, in its own directory."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        if kind == "noida":
            from tests.noida_broker import NoidaBroker

            self.impl: Any = NoidaBroker(workdir / "noida", workdir / "noida.log")
            (workdir / "noida").mkdir()
            self.impl.start()
        elif kind == "kafka":
            from tests.kafka_broker import KafkaBroker

            self.impl = KafkaBroker(workdir / "kafka").start()
        else:
            self.impl = EmbeddedBroker(log_path=workdir / "tansu.log").__enter__()

    @property
    def url(self) -> str:
        return str(self.impl.url)

    @property
    def bootstrap(self) -> str:
        return str(self.impl.bootstrap)

    def stop(self) -> None:
        if self.kind in ("noida", "kafka"):
            self.impl.stop()
        else:
            self.impl.__exit__(None, None, None)


def run_topics(tag: str) -> tuple[str, dict[str, str]]:
    """One run's input topic (reports and joins together) and its output topics."""
    return f"input-{tag}", {k: f"{k}-{tag}" for k in ("releases", "partials", "deadletter",
                                                      "priors")}


def run_settings(kind: str, bootstrap: str, topic: str, outputs: dict[str, str],
                 **more: Any) -> dict[str, Any]:
    """Creates the run's topics; the workers' settings on them (``more`` last)."""
    asyncio.run(create_topics(bootstrap, {topic: PARTITIONS,
                                          **{name: 1 for name in outputs.values()}}))
    return {**SETTINGS, "topic_reports": topic, "topic_membership": topic,
            **{f"topic_{k}": v for k, v in outputs.items()},
            **(TANSU_EXACT if kind == "tansu" else {}),
            **(KAFKA_DEFAULTS if kind == "kafka" else {}), **more}


def tear_down(broker: Broker, workdir: Path, keep: Path | None, prefix: str) -> None:
    """Stops the broker, copies the run's logs to ``keep`` (named ``prefix-<log>``), and removes
    the run's directory."""
    broker.stop()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        for log in workdir.glob("*.log"):
            shutil.copy(log, keep / f"{prefix}-{log.name}")
    shutil.rmtree(workdir, ignore_errors=True)
