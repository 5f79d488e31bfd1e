"""The two views of a journal topic on a broker with transactions: what a reader of committed
records sees, and everything in the log (a reader of uncommitted records, aborted transactions
included); and the checks a releases topic must pass in both (issue 46)."""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

VIEWS = ("read_committed", "read_uncommitted")


async def read_view(bootstrap: str, topic: str, isolation: str,
                    timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every record of partition 0 of ``topic`` up to its end for ``isolation`` (the last
    stable offset for read_committed, the high watermark otherwise), as JSON, in log order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                isolation_level=isolation)
    await consumer.start()
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while await consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} ({isolation}) not read to offset {end}")
            batch = await consumer.getmany(tp, timeout_ms=200)
            out += [json.loads(r.value) for r in batch.get(tp, []) if r.value is not None]
        return out
    finally:
        await consumer.stop()


def twice(records: list[dict[str, Any]], key: str) -> list[Any]:
    """The values of ``key`` that more than one record carries."""
    counts = Counter(r[key] for r in records if r.get(key) is not None)
    return sorted(k for k, n in counts.items() if n > 1)


def short_of_charges(releases: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """Releases (seq, epsilon_spent, charges so far) whose epsilon_spent is below the charges
    published up to them in log order (per privacy window when there are windows)."""
    spent: dict[Any, float] = {}
    short = []
    for r in releases:
        window = r.get("window")
        spent[window] = spent.get(window, 0.0) + float(r["charge"])
        if r["epsilon_spent"] < spent[window] * (1 - 1e-12):
            short.append((int(r["seq"]), float(r["epsilon_spent"]), spent[window]))
    return short
