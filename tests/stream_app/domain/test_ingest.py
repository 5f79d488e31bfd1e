"""Batched input handling (stream_app.domain.ingest) has the per-record semantics (no broker).

The oracle is the per-record path, written out here: parse, check the key, check the partition
(aiokafka's murmur2, the Java client's partitioner), apply the rule, update the partition
aggregate, write the table, one record at a time. The batch path must
leave the same table, the same aggregates, the same dead-letter reasons in the same order and
the same counters, whatever the batch boundaries.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections import Counter
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.batch import Record
from stream_app.domain.ingest import Ingest
from stream_app.domain.inputs import check_key
from stream_app.domain.models import parse_membership, parse_report
from stream_app.domain.rejection import Rejected
from stream_app.domain.rules import EventRules
from stream_app.domain.state import UserState, apply_membership, apply_report
from stream_app.metrics import Metrics
from stream_app.settings import Settings
from tests.stream_app.domain.memory_store import MemoryStore, handle_one

DOMAIN = (0.0, 1.0, 2.0, 3.0, 4.0)
PARTITIONS = 3


def home_of(user: str) -> int:
    """The Java client's partition of a user's key (an implementation other than ours)."""
    return (murmur2(user.encode()) & 0x7FFFFFFF) % PARTITIONS


def settings(**kw: Any) -> Settings:
    base: dict[str, Any] = dict(
        domain=DOMAIN, pairs=("distribution_presence", "value_change"), epsilon=1.0,
        input_partitions=PARTITIONS, dedup_window=4, store="memory://",
        join_grace_seconds=0,  # reports before a join: tests/stream_app/domain/test_hold.py
    )
    base.update(kw)
    return Settings(**base)


class App:
    """The ingest engine on a dict store, with its own metrics."""

    def __init__(self, s: Settings) -> None:
        self.settings = s
        self.rules = EventRules(
            domain=s.domain, grid_log2=s.grid_log2, dedup_window=s.dedup_window,
            auto_join=s.auto_join, known_groups=frozenset({"default"}), default_group="default",
        )
        self.metrics = Metrics.create()
        self.store = MemoryStore()
        self.ingest = Ingest(s, self.rules, self.metrics, self.store)
        self.users = self.store.users
        self.aggregates = self.store.aggregates
        self.handle_batch = self.ingest.handle_batch
        self.handle = functools.partial(handle_one, self.ingest)


def make_app(s: Settings) -> App:
    return App(s)


class Oracle:
    """The per-record path, one record at a time (same rules)."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.table: dict[str, Any] = {}
        self.aggs: dict[int, PartitionAggregate] = {}
        self.counts: Counter[tuple[str, str]] = Counter()

    def agg(self, partition: int) -> PartitionAggregate:
        if partition not in self.aggs:
            self.aggs[partition] = PartitionAggregate(partition=partition)
        return self.aggs[partition]

    def handle(
        self, topic: str, partition: int, key: bytes | None, raw: bytes | None
    ) -> str | None:
        s, app = self.app.settings, self.app
        try:
            agg = self.agg(partition)
            item: Any
            if topic == s.topic_reports:
                item = parse_report(raw, s.max_payload_bytes)
                kind = "report"
            else:
                item = parse_membership(raw, s.max_payload_bytes)
                kind = "membership"
            check_key(key, item.user_id)
            if partition != home_of(item.user_id):
                raise Rejected("wrong_partition")
            d = self.table.get(item.user_id)
            old = UserState.from_stored(d) if d is not None else None
            if kind == "report":
                try:
                    new = apply_report(old, item, partition, app.rules)
                except Rejected as rej:
                    if rej.reason == "not_present" and old is not None \
                            and old.left_ts is not None and item.ts <= old.left_ts:
                        # produced before the user's leave: ignored, not refused
                        self.counts["ignored", "late_after_leave"] += 1
                        return None
                    raise
            else:
                new = apply_membership(old, item, partition, app.rules)
            agg.apply(old, new)
        except Rejected as rej:
            self.counts["rejected", rej.reason] += 1
            return rej.reason
        self.table[item.user_id] = new.to_bytes()
        agg.note_event(item.ts)
        self.counts["consumed", kind] += 1
        return None


def workload(seed: int, n: int) -> list[tuple[str, int, bytes | None, bytes | None]]:
    """Joins, leaves, reports (some duplicated, some out of domain) and broken records."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(12)]
    home = {u: home_of(u) for u in users}
    out: list[tuple[str, int, bytes | None, bytes | None]] = []
    issued: dict[str, list[str]] = {}
    for k in range(n):
        u = rng.choice(users)
        p = home[u] if rng.random() > 0.05 else rng.randrange(PARTITIONS)  # stray partition
        roll = rng.random()
        if roll < 0.25:
            doc: dict[str, Any] = {"user_id": u, "event": rng.choice(["join", "join", "leave"]),
                                   "ts": float(k)}
            out.append(("membership", p, u.encode(), json.dumps(doc).encode()))
            continue
        if roll < 0.30:
            bad = rng.choice([b"{not json", b"[]", b'{"user_id": "x"}', None])
            out.append((rng.choice(["reports", "membership"]), p, u.encode(), bad))
            continue
        value = rng.choice(DOMAIN + (7.0,) if roll < 0.33 else DOMAIN)
        mine = issued.setdefault(u, [])
        rid = rng.choice(mine[-6:]) if mine and rng.random() < 0.15 else f"r{k}"
        mine.append(rid)
        key = u.encode() if rng.random() > 0.03 else b"someone-else"
        doc = {"user_id": u, "value": value, "report_id": rid, "ts": float(rng.randrange(n))}
        out.append(("reports", p, key, json.dumps(doc).encode()))
    return out


def agg_view(agg: PartitionAggregate) -> tuple[Any, ...]:
    groups = {g: v for g, v in agg.group_units.items() if any(v)}
    return (agg.sum_units, groups, agg.newest_ts)


def counters(app: App) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for fam in app.metrics.registry.collect():
        for sample in fam.samples:
            if sample.name == "pufferfish_events_applied_total" and sample.value:
                out["consumed", sample.labels["kind"]] += int(sample.value)
            if sample.name == "pufferfish_events_ignored_total" and sample.value:
                out["ignored", sample.labels["reason"]] += int(sample.value)
            if sample.name == "pufferfish_events_rejected_total" and sample.value:
                out["rejected", sample.labels["reason"]] += int(sample.value)
    return out


def check_same(app: App, oracle: Oracle) -> None:
    assert dict(app.users) == oracle.table
    for p, agg in oracle.aggs.items():
        if agg.newest_ts or agg.sum_units:
            assert agg_view(app.aggregates[p]) == agg_view(agg), p
    assert counters(app) == +oracle.counts


def run_and_compare(
    app: App, oracle: Oracle, records: list[Any], size: int
) -> list[str | None]:
    """Feed ``records`` to the oracle one by one and to the app in batches of ``size``."""
    expected = [oracle.handle(*r) for r in records]
    for start in range(0, len(records), size):
        batch = [Record(*r) for r in records[start : start + size]]
        letters = app.handle_batch(batch)
        want = [(r.message.topic, r.message.value, why) for r, why in
                zip(batch, expected[start : start + size], strict=True) if why is not None]
        assert [letter[:3] for letter in letters] == want
    check_same(app, oracle)
    return expected


@pytest.mark.parametrize("size", [1, 7, 50, 500])
@pytest.mark.parametrize("auto_join", [False, True])
def test_batches_match_the_per_record_path(size: int, auto_join: bool) -> None:
    s = settings(auto_join=auto_join)
    app, oracle = make_app(s), Oracle(make_app(s))
    expected = run_and_compare(app, oracle, workload(seed=size, n=400), size)
    assert {"duplicate_report", "key_mismatch", "malformed_json", "out_of_domain",
            "wrong_partition"} <= set(expected)
    assert expected.count(None) > 100


def test_handle_one_record() -> None:
    app = make_app(settings())
    join = json.dumps({"user_id": "a", "event": "join", "ts": 1.0}).encode()
    report = json.dumps({"user_id": "a", "value": 2.0, "report_id": "r", "ts": 2.0}).encode()
    a, b = home_of("a"), home_of("b")
    assert app.handle("membership", a, b"a", join) is None
    assert app.handle("reports", a, b"a", report) is None
    assert app.handle("reports", a, b"a", report) == "duplicate_report"
    assert app.handle("reports", b, b"b", report) == "key_mismatch"
    other = json.dumps({"user_id": "b", "event": "join", "group": "nope", "ts": 1.0}).encode()
    assert app.handle("membership", b, b"b", other) == "unknown_group"
    state = UserState.from_stored(app.users["a"])
    assert state.counts == (0, 0, 1, 0, 0) and state.value_units == 2 * 1024


def test_wrong_partition_is_rejected_before_any_state_change() -> None:
    app = make_app(settings())
    a = home_of("a")
    wrong = (a + 1) % PARTITIONS
    join = json.dumps({"user_id": "a", "event": "join", "ts": 1.0}).encode()
    report = json.dumps({"user_id": "a", "value": 2.0, "report_id": "r", "ts": 2.0}).encode()
    assert app.handle("membership", wrong, b"a", join) == "wrong_partition"
    assert app.users == {} and all(not agg.sum_units for agg in app.aggregates.values())
    assert app.handle("membership", a, b"a", join) is None
    before = dict(app.users)
    assert app.handle("reports", wrong, b"a", report) == "wrong_partition"
    assert app.users == before  # not counted, not remembered as a seen report id
    assert app.handle("reports", a, b"a", report) is None  # the same id is still new
    # parse errors and a key that is not the user_id come first
    assert app.handle("reports", wrong, b"a", b"{oops") == "malformed_json"
    assert app.handle("reports", wrong, b"b", report) == "key_mismatch"
    assert counters(app)["rejected", "wrong_partition"] == 2


def test_a_state_written_by_an_older_version_is_read_and_rewritten() -> None:
    """A dict value with report-id strings (``recent_ids``): its ids still deduplicate, and the
    user is written back in this version's form (bytes, digests in ``ids``)."""
    app = make_app(settings())
    a = home_of("a")
    app.users["a"] = {"partition": a, "present": True, "group": "default", "value_units": 1024,
                      "value_ts": 1.0, "counts": [0, 1, 0, 0, 0], "recent_ids": ["r1", "r2"]}
    old = json.dumps({"user_id": "a", "value": 2.0, "report_id": "r2", "ts": 2.0}).encode()
    new = json.dumps({"user_id": "a", "value": 3.0, "report_id": "r3", "ts": 3.0}).encode()
    letters = app.handle_batch([Record("reports", a, b"a", old), Record("reports", a, b"a", new)])
    assert [letter.reason for letter in letters] == ["duplicate_report"]
    stored = app.users["a"]
    assert isinstance(stored, bytes) and b"recent_ids" not in stored
    state = UserState.from_stored(stored)
    assert state.counts == (0, 1, 0, 1, 0) and state.value_units == 3 * 1024
    assert len(state.recent_ids) == 3
    # both old ids and the new one are remembered
    assert app.handle("reports", a, b"a", old) == "duplicate_report"


def test_an_unreadable_stored_state_dead_letters_the_users_records() -> None:
    app = make_app(settings())
    a, b = home_of("a"), home_of("b")
    app.store.aggregate(b)  # built from the table before the bad value is there
    app.users["a"] = b"not json"
    join = {"event": "join", "ts": 1.0}
    letters = app.handle_batch([
        Record("membership", a, b"a", json.dumps({"user_id": "a", **join}).encode()),
        Record("membership", b, b"b", json.dumps({"user_id": "b", **join}).encode()),
    ])
    assert [letter.reason for letter in letters] == ["invalid_schema"]
    assert app.users["a"] == b"not json" and UserState.from_stored(app.users["b"]).present
    assert counters(app) == {("rejected", "invalid_schema"): 1, ("consumed", "membership"): 1}


def test_a_user_whose_records_span_partitions_is_replayed_record_by_record() -> None:
    """Unreachable while the partition check holds (a key has one partition); with the check
    off, each record still lands on its own partition's aggregate, in order."""
    app = make_app(settings())
    app.ingest.partition_check.check = lambda key, partition: None  # type: ignore[method-assign]
    join = json.dumps({"user_id": "a", "event": "join", "ts": 5.0}).encode()
    report = json.dumps({"user_id": "a", "value": 2.0, "report_id": "r", "ts": 7.0}).encode()
    again = json.dumps({"user_id": "a", "value": 3.0, "report_id": "r", "ts": 8.0}).encode()
    letters = app.handle_batch([Record("membership", 0, b"a", join),
                                Record("reports", 1, b"a", report),
                                Record("reports", 2, b"a", again)])
    assert [letter.reason for letter in letters] == ["duplicate_report"]
    state = UserState.from_stored(app.users["a"])
    assert (state.partition, state.present, state.value_units) == (1, True, 2 * 1024)
    assert state.counts == (0, 0, 1, 0, 0)
    agg0, agg1 = app.aggregates[0], app.aggregates[1]
    assert (agg0.sum_units, agg0.newest_ts) == (0, 5.0)
    assert (agg1.sum_units, agg1.newest_ts) == (2 * 1024, 7.0)
    assert 2 not in app.aggregates or app.aggregates[2].newest_ts == 0.0
    assert counters(app) == {("consumed", "membership"): 1, ("consumed", "report"): 1,
                             ("rejected", "duplicate_report"): 1}


def test_a_user_stored_anew_between_batches_is_read_from_the_store() -> None:
    """A batch continues from the draft the previous batch left only while the store holds the
    bytes written then: a value replaced in between (a changelog recovery, another worker's
    write) is decoded and used instead."""
    app = make_app(settings())
    a = home_of("a")

    def report(value: float, rid: str, ts: float) -> Record:
        doc = {"user_id": "a", "value": value, "report_id": rid, "ts": ts}
        return Record("reports", a, b"a", json.dumps(doc).encode())

    join = json.dumps({"user_id": "a", "event": "join", "ts": 1.0}).encode()
    assert app.handle_batch([Record("membership", a, b"a", join), report(1.0, "r1", 2.0)]) == []
    replaced = UserState(partition=a, present=True, group="default", value_units=4 * 1024,
                         value_ts=3.0, counts=(0, 0, 0, 0, 5), recent_ids=())
    app.users["a"] = replaced.to_bytes()
    app.aggregates.clear()  # rebuilt from the store, as after a rebalance
    # r1 is unknown to the replaced state: accepted again; value 2.0 is older than ts 3.0
    assert app.handle_batch([report(2.0, "r1", 2.5)]) == []
    state = UserState.from_stored(app.users["a"])
    assert state.counts == (0, 0, 1, 0, 5) and state.value_units == 4 * 1024
    assert app.aggregates[a].sum_units == 4 * 1024
    # equal bytes in a new object (a store that returns copies): the same state continues
    app.users["a"] = bytes(bytearray(app.users["a"]))
    letters = app.handle_batch([report(3.0, "r1", 4.0), report(3.0, "r3", 4.0)])
    assert [letter.reason for letter in letters] == ["duplicate_report"]
    state = UserState.from_stored(app.users["a"])
    assert state.counts == (0, 0, 1, 1, 5) and state.value_units == 3 * 1024
    assert app.aggregates[a].sum_units == 3 * 1024


def test_the_input_paths_cpu_time_is_counted() -> None:
    """pufferfish_input_cpu_seconds_total: the thread CPU time of each batch, no more."""
    app = make_app(settings())
    records = [Record(*r) for r in workload(seed=3, n=3000)]
    seen = []
    for start in range(0, len(records), 500):
        before = time.thread_time()
        app.handle_batch(records[start:start + 500])
        spent = time.thread_time() - before
        total = app.metrics.registry.get_sample_value("pufferfish_input_cpu_seconds_total")
        assert total is not None
        seen.append(total)
        assert 0 < total - (seen[-2] if len(seen) > 1 else 0.0) <= spent
