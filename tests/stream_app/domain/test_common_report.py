"""The fused path of the common report (stream_app.domain.common_report) decides nothing of its
own: an ingest that sends every record through the general path (``OneRecord.stage``) leaves
the same stored bytes, aggregates, dead letters and counters, batch after batch, on inputs
that mix every way a report leaves the fused path. The drafts kept between batches
(``ingest.KEPT_USERS``) are used only while the store holds the bytes they were written as.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from stream_app.domain import common_report
from stream_app.domain import ingest as ingest_module
from stream_app.domain.batch import Record
from stream_app.domain.ingest import Ingest
from stream_app.domain.rules import EventRules
from stream_app.domain.state import UserState
from stream_app.metrics import Metrics
from stream_app.settings import Settings
from tests.stream_app.domain.clock import FixedClock
from tests.stream_app.domain.memory_store import MemoryStore

DOMAIN = (0.0, 1.0, 2.0, 3.0, 4.0)
PARTITIONS = 3
USERS = [f"u{i}" for i in range(10)] + ["\u00e9t\u00e9"]


def home(user: str) -> int:
    """The Java client's partition (aiokafka's murmur2: an implementation other than ours)."""
    return int(murmur2(user.encode()) & 0x7FFFFFFF) % PARTITIONS


class Run:
    """An ingest on a dict store; ``general``: every record through the general path."""

    def __init__(self, s: Settings, general: bool) -> None:
        rules = EventRules(domain=s.domain, grid_log2=s.grid_log2, dedup_window=s.dedup_window,
                           auto_join=s.auto_join, known_groups=frozenset({"default"}),
                           default_group="default")
        self.metrics = Metrics.create()
        self.store = MemoryStore()
        self.ingest = Ingest(s, rules, self.metrics, self.store)
        self.general = general
        self.general_calls = 0

    def batch(self, records: list[Record]) -> list[Any]:
        with self._path():
            return [tuple(letter) for letter in self.ingest.handle_batch(records)]

    @contextmanager
    def _path(self) -> Iterator[None]:
        original: Any = common_report.stage

        def counted(events: Any, touched: Any, is_report: Any, *args: Any) -> None:
            *rest, stage_one, touch = args

            def one(i: int, event: Any) -> None:
                self.general_calls += 1
                stage_one(i, event)

            if self.general:
                for i, event in enumerate(events):
                    one(i, event)
            else:
                original(events, touched, is_report, *rest, one, touch)

        setattr(common_report, "stage", counted)  # noqa: B010 - mypy: a looser signature
        try:
            yield
        finally:
            setattr(common_report, "stage", original)  # noqa: B010

    def view(self) -> tuple[Any, ...]:
        aggs = {p: (a.sum_units, {g: v for g, v in a.group_units.items() if any(v)},
                    a.newest_ts, dict(a.held_users))
                for p, a in sorted(self.store.aggregates.items())}
        counts: Counter[tuple[str, str]] = Counter()
        for fam in self.metrics.registry.collect():
            for sample in fam.samples:
                if sample.name.startswith("pufferfish_events_") and sample.value \
                        and sample.name.endswith("_total"):
                    counts[sample.name, ",".join(sample.labels.values())] += int(sample.value)
        return dict(self.store.users), aggs, counts


def workload(seed: int, n: int, moved: bool = False) -> list[Record]:
    """Reports mostly of present users, with every way out of the fused path: joins and
    leaves, out-of-domain, int and -0.0 values, duplicates, ids and ts out of bounds, a JSON
    NaN, broken JSON, null values, wrong keys and partitions, a membership-shaped record on the
    reports topic, reports before a join, late reports, and replays of earlier offsets."""
    rng = random.Random(seed)
    out: list[Record] = []
    offsets: Counter[tuple[str, int]] = Counter()
    issued: dict[str, list[str]] = {}

    def emit(topic: str, user: str, raw: bytes | None, key: bytes | None = None,
             partition: int | None = None) -> None:
        p = home(user) if partition is None else partition
        out.append(Record(topic, p, user.encode() if key is None else key, raw,
                          offsets[topic, p]))
        offsets[topic, p] += 1

    for u in USERS:
        emit("membership", u, json.dumps({"user_id": u, "event": "join", "ts": 0.0}).encode())
    for k in range(n):
        u = rng.choice(USERS)
        roll = rng.random()
        ts = float(k) + rng.choice((0.0, 0.5, -3.0))
        if roll < 0.04:
            event = rng.choice(["join", "join", "join", "leave"])
            emit("membership", u, json.dumps({"user_id": u, "event": event,
                                              "ts": float(k)}).encode())
            continue
        if roll < 0.06 and len(out) > 20:  # a replay: earlier records at their offsets
            start = rng.randrange(len(out) - 10)
            out.extend(out[start:start + rng.randrange(1, 10)])
            continue
        mine = issued.setdefault(u, [])
        rid = rng.choice(mine[-6:]) if mine and rng.random() < 0.1 else f"r{k}"
        mine.append(rid)
        doc: dict[str, Any] = {"user_id": u, "value": rng.choice(DOMAIN), "report_id": rid,
                               "ts": max(ts, 0.0)}
        odd = rng.random()
        key, partition, raw = None, None, None
        if odd < 0.02:
            doc["value"] = 7.0
        elif odd < 0.03:
            doc["value"] = 2
        elif odd < 0.04:
            doc["value"] = -0.0
        elif odd < 0.05:
            doc["report_id"] = "x" * 129
        elif odd < 0.055:
            doc["report_id"] = ""
        elif odd < 0.06:
            doc["ts"] = -1.0
        elif odd < 0.065:
            doc["ts"] = 5
        elif odd < 0.07:
            raw = b'{"user_id": "%s", "value": NaN, "report_id": "n", "ts": 1.0}' % u.encode()
        elif odd < 0.075:
            raw = b'{"user_id": "' + u.encode()
        elif odd < 0.08:
            raw = b"null"
        elif odd < 0.085:
            key = b"someone-else"
        elif odd < 0.09:
            partition = (home(u) + 1) % PARTITIONS
        elif odd < 0.095:
            doc["event"] = "join"
        elif odd < 0.10:
            doc["user_id"] = 17
        elif moved and odd < 0.2:
            partition = rng.randrange(PARTITIONS)
        emit("reports", u, raw if raw is not None else json.dumps(doc).encode(), key,
             partition)
    return out


def settings(**kw: Any) -> Settings:
    base: dict[str, Any] = dict(domain=DOMAIN, pairs=("distribution_presence",), epsilon=1.0,
                                input_partitions=PARTITIONS, dedup_window=4,
                                store="memory://")
    base.update(kw)
    return Settings(**base)


def compare(s: Settings, records: list[Record], sizes: Callable[[random.Random], int],
            seed: int, prepare: Callable[[Run], None] = lambda run: None) -> tuple[Run, Run]:
    fused, general = Run(s, general=False), Run(s, general=True)
    prepare(fused)
    prepare(general)
    rng, start = random.Random(seed), 0
    while start < len(records):
        size = sizes(rng)
        batch = records[start:start + size]
        assert fused.batch(batch) == general.batch(batch), start
        assert fused.view() == general.view(), start
        FixedClock.now += 7.0  # a held report's grace runs out between some batches
        start += size
    return fused, general


VARIANTS: dict[str, dict[str, Any]] = {
    "two topics": {},
    "one topic": {"topic_membership": "reports"},
    "auto join": {"auto_join": True},
    "hold": {"join_grace_seconds": 20.0},
    "window 64": {"dedup_window": 64},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fused_path_gives_the_general_paths_outcome(
    variant: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_module, "time", FixedClock)
    records = workload(seed, 1500)
    fused, general = compare(settings(**VARIANTS[variant]), records,
                             lambda rng: rng.choice((1, 5, 40, 300)), seed)
    letters = Counter(general.view()[2])
    assert any("rejected" in name for name, _ in letters)  # the workload refuses records
    # a third or more took the fused path (the rest: the ways out), every one the general path
    assert general.general_calls == len(records)
    assert fused.general_calls < 2 / 3 * len(records)


def test_keys_that_move_partitions_leave_the_fused_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the partition check off, a user's records on several partitions are replayed
    record by record (``Ingest._replay``): the same outcome as the general path."""
    monkeypatch.setattr(ingest_module, "time", FixedClock)

    def no_partition_check(run: Run) -> None:
        run.ingest.partition_check.check = (  # type: ignore[method-assign]
            lambda key, partition: None)

    compare(settings(), workload(4, 1200, moved=True), lambda rng: rng.choice((3, 60, 400)), 4,
            no_partition_check)


def report(user: str, value: float, rid: str, ts: float, offset: int) -> Record:
    doc = {"user_id": user, "value": value, "report_id": rid, "ts": ts}
    return Record("reports", home(user), user.encode(), json.dumps(doc).encode(), offset)


def join(user: str, offset: int) -> Record:
    doc = {"user_id": user, "event": "join", "ts": 0.5}
    return Record("membership", home(user), user.encode(), json.dumps(doc).encode(), offset)


def test_plain_reports_take_only_the_fused_path() -> None:
    """Reports of present users, in the domain, with new ids: none goes to the general path,
    first records of a user in a batch included; the counts are the reports sent."""
    run = Run(settings(dedup_window=64), general=False)
    users = USERS[:6]
    assert run.batch([join(u, i) for i, u in enumerate(users)]) == []
    assert run.general_calls == len(users)
    rng = random.Random(9)
    sent: Counter[tuple[str, float]] = Counter()
    offsets: Counter[str] = Counter()
    for b in range(5):
        batch = []
        for k in range(60):
            u, value = rng.choice(users), rng.choice(DOMAIN)
            batch.append(report(u, value, f"r{b}-{k}", float(b * 100 + k), offsets[u]))
            offsets[u] += 1
            sent[u, value] += 1
        assert run.batch(batch) == []
    assert run.general_calls == len(users)
    for u in users:
        counts = UserState.from_stored(run.store.users[u]).counts
        assert counts == tuple(sent[u, v] for v in DOMAIN)


def test_a_kept_draft_is_not_used_once_the_store_holds_other_bytes() -> None:
    """A user written two batches ago and not touched since: a value replaced in the store in
    between (a recovery, another worker) is decoded, not the kept draft."""
    run = Run(settings(), general=False)
    assert run.batch([join("a", 0), report("a", 1.0, "r1", 1.0, 0)]) == []
    assert run.batch([join("b", 1)]) == []
    replaced = UserState(partition=home("a"), present=True, group="default",
                         value_units=4 * 1024, value_ts=3.0, counts=(0, 0, 0, 0, 5))
    run.store.users["a"] = replaced.to_bytes()
    run.store.aggregates.clear()
    assert run.batch([report("a", 2.0, "r1", 2.5, 1), report("a", 3.0, "r2", 4.0, 2)]) == []
    state = UserState.from_stored(run.store.users["a"])
    assert state.counts == (0, 0, 1, 1, 5) and state.value_units == 3 * 1024
    assert run.store.aggregates[home("a")].sum_units == 3 * 1024


def test_a_draft_touched_without_a_write_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch that touches a user but writes nothing (here: a record that fails half way
    through its draft) drops the kept draft: the next batch decodes the stored bytes."""
    run = Run(settings(), general=False)
    assert run.batch([join("a", 0), report("a", 1.0, "r1", 1.0, 0)]) == []
    stored = run.store.users["a"]
    original = common_report.stage

    def half_applied(events: Any, touched: Any, *args: Any) -> None:
        original(events, touched, *args)
        touched["a"].draft.counts[4] += 100  # a change no write carries
        touched["a"].accepted = 0

    monkeypatch.setattr(common_report, "stage", half_applied)
    run.ingest.handle_batch([report("a", 2.0, "r2", 2.0, 1)])
    assert run.store.users["a"] == stored
    monkeypatch.setattr(common_report, "stage", original)
    assert run.batch([report("a", 3.0, "r3", 3.0, 2)]) == []
    assert UserState.from_stored(run.store.users["a"]).counts == (0, 1, 0, 1, 0)


def test_at_most_kept_users_drafts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest_module, "KEPT_USERS", 3)
    run = Run(settings(), general=False)
    users = [f"k{i}" for i in range(8)]
    for i, u in enumerate(users):
        assert run.batch([join(u, i)]) == []
    kept = run.ingest._written  # noqa: SLF001 - the bound is what is tested
    assert list(kept) == users[-3:]
    # the evicted users continue from their stored bytes
    assert run.batch([report(u, 2.0, "r", 2.0, 0) for u in users]) == []
    assert all(UserState.from_stored(run.store.users[u]).counts == (0, 0, 1, 0, 0)
               for u in users)
