"""The gate of the drain loop (stream_app/faust_adapter/alignment.py, docs/design.md "Per-user
order across the input topics"), no broker: the worker's consumer drains a scripted client
serving a reports partition and its membership partition, with Kafka timestamps, positions and
end offsets as aiokafka reports them after each fetch (client_view.py).

The order rule: the two partitions are merged by timestamp, membership first at equal
timestamps — whatever order the client returns them in, both sides kept back alike. A seek or
revoke of a partition while its records are kept back neither duplicates nor loses one.
"""

from __future__ import annotations

import asyncio
import bisect
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from stream_app.faust_adapter.app import new_app
from stream_app.faust_adapter.client_view import ClientView, FetchedRecords
from stream_app.settings import Settings

R0, M0 = TP("reports", 0), TP("membership", 0)


class TwoTopicClient:
    """The Kafka client under the consumer (``_thread``): per partition, a log of (offset,
    timestamp ms), a position, and the fetch from which its records are visible (a membership
    fetch response that comes late). Records come in batches of `max_records` per partition,
    reports first; the end offset of a partition is known once a fetch reached it."""

    def __init__(self, consumer: Any, logs: dict[Any, list[tuple[int, int]]],
                 max_records: int = 10, visible_from: dict[Any, int] | None = None) -> None:
        self.consumer, self.logs, self.max_records = consumer, logs, max_records
        self.visible_from = visible_from or {}
        self.position = {tp: 0 for tp in logs}
        self.ends = {tp: (log[-1][0] + 1 if log else 0) for tp, log in logs.items()}
        self.polled: dict[Any, int] = {}
        self.fetches = 0
        self.delivered: list[tuple[str, int]] = []
        self.asked: list[set[Any]] = []
        self.assigned = set(logs)
        self.on_record: Any = None
        self.fetcher = SimpleNamespace(_stopped=asyncio.Event())
        consumer.callback = self._callback
        consumer.assignment = lambda: set(self.assigned)
        consumer._active_partitions = set(self.assigned)
        consumer._thread = SimpleNamespace(getmany=self._getmany, seek=self._seek,
                                           highwater=lambda tp: self.ends[tp],
                                           position=self._position)
        consumer.app.topics.acks_enabled_for = lambda topic: True
        consumer._gate.assign(self.assigned)

    def _seek(self, tp: Any, offset: int) -> None:
        self.position[tp] = offset

    async def _position(self, tp: Any) -> int:
        return self.position[tp]

    async def _callback(self, message: Any) -> None:
        if self.on_record is not None:
            await self.on_record(message)
        self.delivered.append((message.topic, message.offset))

    async def _getmany(self, active_partitions: set[Any], timeout: float) -> FetchedRecords:
        self.fetches += 1
        self.asked.append(set(active_partitions))
        records: dict[Any, list[ConsumerRecord[bytes, bytes]]] = {}
        for tp in sorted(active_partitions & self.assigned, key=lambda t: t.topic != "reports"):
            if self.fetches < self.visible_from.get(tp, 0):
                continue
            self.polled[tp] = self.fetches
            log = self.logs[tp]
            start = bisect.bisect_left(log, (self.position[tp], -1))
            batch = log[start:start + self.max_records]
            if batch:
                records[tp] = [ConsumerRecord(tp.topic, tp.partition, o, ts, 0, b"u", b"{}",
                                              None, 1, 2, []) for o, ts in batch]
                following = start + len(batch)
                self.position[tp] = log[following][0] if following < len(log) else self.ends[tp]
        views = {tp: ClientView(self.position[tp],
                                self.ends[tp] if tp in self.polled else None,
                                self.polled.get(tp)) for tp in self.assigned}
        if not records and self.all_read() and not self.consumer._gate.held:
            self.fetcher._stopped.set()
        await asyncio.sleep(0)
        return FetchedRecords(records, views)

    def all_read(self) -> bool:
        return all(self.position[tp] >= self.ends[tp] for tp in self.assigned)

    async def drain(self) -> None:
        await asyncio.wait_for(self.consumer._drain_messages(self.fetcher), 20)

    def order_violations(self) -> list[tuple[int, int]]:
        """(report offset, membership offset) pairs handed over in the wrong order: a report
        before a membership record whose timestamp is not later than the report's."""
        ts = {(tp.topic, o): t for tp, log in self.logs.items() for o, t in log}
        seen_m: set[int] = set()
        bad = []
        for topic, offset in self.delivered:
            if topic == "membership":
                seen_m.add(offset)
                continue
            bad += [(offset, o) for o, t in self.logs[M0]
                    if t <= ts[("reports", offset)] and o not in seen_m]
        return bad

    def merge_violations(self) -> list[tuple[tuple[str, int], tuple[str, int]]]:
        """Pairs (earlier handed over, later handed over) of the two topics out of timestamp
        order, membership first at equal timestamps."""
        rank = {"membership": 0, "reports": 1}
        ts = {(tp.topic, o): t for tp, log in self.logs.items() for o, t in log}
        bad = []
        for i, a in enumerate(self.delivered):
            for b in self.delivered[i + 1:]:
                if a[0] != b[0] and (ts[b], rank[b[0]]) < (ts[a], rank[a[0]]):
                    bad.append((a, b))
        return bad


@pytest.fixture
async def consumer() -> Any:
    app = new_app(Settings(), "alignment-test", broker="kafka://127.0.0.1:1",
                  store="memory://", web_enabled=False)
    assert app.consumer._gate is not None  # two topics (the default): gated
    return app.consumer


def reports(n: int, first_ts: int, step: int = 1) -> list[tuple[int, int]]:
    return [(o, first_ts + o * step) for o in range(n)]


async def test_reports_wait_for_the_joins_before_them_when_membership_comes_late(
    consumer: Any,
) -> None:
    """The fresh-start backlog: the membership fetch comes back 3 fetches after the reports."""
    client = TwoTopicClient(consumer, {R0: reports(100, 1_000), M0: reports(5, 990)},
                            visible_from={M0: 4})
    await client.drain()
    assert client.order_violations() == []
    assert sorted(client.delivered) == sorted(
        [("reports", o) for o in range(100)] + [("membership", o) for o in range(5)])
    assert any(R0 not in asked for asked in client.asked)  # kept back: not fetched meanwhile


async def test_the_pair_is_merged_by_timestamp_membership_first_at_ties(consumer: Any) -> None:
    """Membership never caught up (its end stays ahead): its timestamps open the gate, strictly
    for a report (a membership record of the same millisecond goes first), a fetched membership
    record not handed over yet counting as much as one handed over."""
    m_log = reports(40, 1_000, step=10)  # 1000, 1010, ...
    client = TwoTopicClient(consumer, {R0: reports(30, 1_000, step=10), M0: m_log},
                            max_records=3)
    client.ends[M0] = 10_000  # records still to come: never caught up
    await asyncio.wait_for(_drain_until(client, lambda: len(client.delivered) >= 70), 20)
    assert client.order_violations() == []
    assert [o for t, o in client.delivered if t == "reports"] == list(range(30))
    # membership k and report k share ts 1000 + 10 k: membership k, then report k
    merged = [(t, k) for k in range(30) for t in ("membership", "reports")]
    assert client.delivered == merged + [("membership", k) for k in range(30, 40)]


async def _drain_until(client: TwoTopicClient, done: Any) -> None:
    task = asyncio.ensure_future(client.drain())
    while not done() and not task.done():
        await asyncio.sleep(0.01)
    client.fetcher._stopped.set()
    await task


async def seek_to_committed(consumer: Any, client: TwoTopicClient, tp: Any) -> None:
    """A rebalance seeks the partition back to its committed offset 0."""
    await consumer.seek(tp, 0)


async def revoke_then_assign(consumer: Any, client: TwoTopicClient, tp: Any) -> None:
    """The partition is revoked, then assigned again and read from its committed offset
    (nothing committed: 0)."""
    consumer._expected.forget(tp)  # what on_partitions_revoked does first
    assert tp not in consumer._gate.held
    client.position[tp] = 0
    consumer._expected.sought(tp, 0)


@pytest.mark.parametrize("rebalance", [seek_to_committed, revoke_then_assign])
@pytest.mark.parametrize("kept", [R0, M0])
async def test_kept_back_records_moved_by_a_rebalance_are_handed_over_once(
    consumer: Any, rebalance: Any, kept: Any,
) -> None:
    """While one side's first batch is kept back (its partner's fetch comes late), a
    rebalance moves that partition: the kept copies are dropped, the fetch from the committed
    offset brings each record once."""
    partner = M0 if kept == R0 else R0
    client = TwoTopicClient(consumer, {kept: reports(25, 1_000), partner: reports(3, 990)},
                            visible_from={partner: 3})
    moved = False

    async def on_record(message: Any) -> None:
        nonlocal moved
        if message.topic == partner.topic and not moved:
            moved = True
            assert consumer._gate.held.get(kept)  # its first batch is kept back
            await rebalance(consumer, client, kept)
            assert kept not in consumer._gate.held

    client.on_record = on_record
    await client.drain()
    assert moved and client.merge_violations() == []
    for tp, n in ((kept, 25), (partner, 3)):
        assert [o for t, o in client.delivered if t == tp.topic] == list(range(n))


async def test_a_leave_produced_after_a_report_does_not_overtake_it(consumer: Any) -> None:
    """The README walk (examples/events.jsonl): join, report, leave; the membership fetch
    comes back first and the reports' 3 fetches later — the leave waits for the report."""
    client = TwoTopicClient(consumer, {R0: [(0, 1_001)], M0: [(0, 1_000), (1, 1_003)]},
                            visible_from={R0: 4})
    await client.drain()
    assert client.delivered == [("membership", 0), ("reports", 0), ("membership", 1)]
    assert any(M0 not in asked for asked in client.asked)  # kept back: not fetched meanwhile


async def test_same_millisecond_goes_membership_first_both_ways(consumer: Any) -> None:
    """Equal timestamps: the membership record first, whichever side comes back first — a
    join before its report, and a leave before a report of the same millisecond (which the
    domain then ignores as after the leave: docs/design.md, "The gate")."""
    client = TwoTopicClient(consumer, {R0: [(0, 1_000), (1, 1_005)],
                                       M0: [(0, 1_000), (1, 1_005)]},
                            visible_from={M0: 3})
    await client.drain()
    assert client.delivered == [("membership", 0), ("reports", 0),
                                ("membership", 1), ("reports", 1)]


async def test_both_sides_kept_back_the_smaller_timestamp_goes(consumer: Any) -> None:
    """Neither side ever caught up (their ends stay ahead), both fetched together one record
    at a time, timestamps interleaved: no deadlock, the exact timestamp order."""
    client = TwoTopicClient(consumer, {R0: [(o, 1_000 + 2 * o) for o in range(30)],
                                       M0: [(o, 1_001 + 2 * o) for o in range(30)]},
                            max_records=1)
    client.ends[R0] = client.ends[M0] = 10_000
    await asyncio.wait_for(_drain_until(client, lambda: len(client.delivered) >= 40), 20)
    merged = [(t, o) for o in range(30) for t in ("reports", "membership")]
    assert len(client.delivered) >= 40
    assert client.delivered == merged[:len(client.delivered)]


@pytest.mark.parametrize("quiet", [R0, M0])
async def test_a_caught_up_quiet_side_never_blocks_the_other(consumer: Any, quiet: Any) -> None:
    """One side has a single old record and nothing after it; the other's 200 later records
    all go, in order, without waiting for a record of the quiet side that never comes."""
    busy = M0 if quiet == R0 else R0
    client = TwoTopicClient(consumer, {quiet: [(0, 900)], busy: reports(200, 1_000)})
    await client.drain()
    assert client.merge_violations() == []
    assert [o for t, o in client.delivered if t == busy.topic] == list(range(200))
    assert consumer._gate.held == {}


async def test_kept_back_reports_whose_membership_partition_goes_elsewhere_go_once(
    consumer: Any,
) -> None:
    """A rebalance keeps the reports partition here but gives its membership partition to
    another worker: nothing to wait for any more, the kept records go, each once, in order."""
    client = TwoTopicClient(consumer, {R0: reports(25, 1_000), M0: reports(3, 990)},
                            visible_from={M0: 1_000})  # membership never comes back here
    fetch = consumer._thread.getmany

    async def reassigning(active_partitions: set[Any], timeout: float) -> Any:
        if client.fetches == 2:
            assert consumer._gate.held.get(R0)  # the first batch is kept back
            client.assigned.discard(M0)
            consumer._gate.assign(client.assigned)
        return await fetch(active_partitions, timeout)

    consumer._thread.getmany = reassigning
    await client.drain()
    assert [o for t, o in client.delivered if t == "reports"] == list(range(25))


async def test_one_topic_has_no_gate() -> None:
    s = Settings(topic_membership="reports")
    app = new_app(s, "alignment-one-topic", broker="kafka://127.0.0.1:1", store="memory://",
                  web_enabled=False)
    assert app.consumer._gate is None


async def test_a_trailing_transaction_marker_is_not_taken_for_a_stall(consumer: Any) -> None:
    """The fetch that returned the last records left the client past the commit marker after
    them: the stall watch must not seek (issue 34: one seek per idle period)."""
    client = TwoTopicClient(consumer, {R0: [(o, 1_000 + o) for o in range(9)],
                                       M0: [(0, 900)]})
    client.ends[R0] = 10  # offset 9 is the commit marker
    await client.drain()
    assert client.position[R0] == 10 and consumer._expected.expected(R0) == 9
    assert not consumer._expected.stalled(R0, 10)
    assert not consumer._expected.stalled(R0, 10)  # twice in a row: still explained
