"""The events the throughput and latency benchmarks offer, and producing them.

U users join; a churn share of them leaves and rejoins, the rest report values of the
benchmark domain (bench/harness.py ``DOMAIN``). Events are (input topic kind, user id, JSON
document), the kind being ``reports`` or ``membership`` (a key of ``topic_names``).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer

from bench.harness import DOMAIN

Event = tuple[str, str, dict[str, Any]]  # topic kind, user id, document


@dataclass
class Workload:
    """Valid events for U users: ``present`` users report, ``churn`` users leave and rejoin."""

    users: int
    seed: int = 1
    churn_share: float = 0.1
    rng: random.Random = field(init=False)
    present: list[str] = field(init=False)
    churn: list[str] = field(init=False)
    churn_in: dict[str, bool] = field(init=False)
    next_id: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        ids = [f"user-{i:06d}" for i in range(self.users)]
        n_churn = max(1, int(self.users * self.churn_share))
        self.churn, self.present = ids[:n_churn], ids[n_churn:]
        self.churn_in = dict.fromkeys(self.churn, True)

    def join(self, uid: str) -> Event:
        return "membership", uid, {"user_id": uid, "event": "join", "ts": time.time()}

    def report(self, uid: str, value: float | None = None) -> Event:
        self.next_id += 1
        v = self.rng.choice(DOMAIN) if value is None else value
        return "reports", uid, {"user_id": uid, "value": v, "report_id": f"r{self.next_id}",
                                "ts": time.time()}

    def setup_joins(self) -> list[Event]:
        return [self.join(u) for u in self.churn + self.present]

    def setup_reports(self) -> list[Event]:
        return [self.report(u) for u in self.churn]

    def backlog(self, m: int, membership_share: float = 0.02) -> list[Event]:
        """M events: reports of present users, a ``membership_share`` of churn leaves/joins."""
        out = []
        for _ in range(m):
            if self.rng.random() < membership_share:
                uid = self.rng.choice(self.churn)
                was_in = self.churn_in[uid]
                self.churn_in[uid] = not was_in
                event = "leave" if was_in else "join"
                out.append(("membership", uid, {"user_id": uid, "event": event, "ts": time.time()}))
            else:
                out.append(self.report(self.rng.choice(self.present)))
        return out


async def produce(bootstrap: str, topics: dict[str, str], events: Iterable[Event]) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topics[t], json.dumps(v).encode(), key=k.encode())
            for t, k, v in events
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return len(futures)


def produce_sync(bootstrap: str, topics: dict[str, str], events: Sequence[Any]) -> int:
    return asyncio.run(produce(bootstrap, topics, events))
