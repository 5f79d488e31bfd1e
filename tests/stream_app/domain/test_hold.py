"""Reports before their user's join are held, applied at the join, expired after the grace;
records already reflected in a user's state (by input offset) are recognised as replays.
No broker here: tests/reliability/test_input_order.py runs the same on a real one."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from aiokafka.partitioner import murmur2

from stream_app.domain import ingest as ingest_module
from stream_app.domain.batch import Record
from stream_app.domain.ingest import Ingest
from stream_app.domain.rules import EventRules
from stream_app.domain.state import UserState
from stream_app.metrics import Metrics
from stream_app.settings import Settings
from tests.stream_app.domain.clock import FixedClock
from tests.stream_app.domain.memory_store import MemoryStore

DOMAIN = (0.0, 1.0, 2.0, 3.0)
PARTITIONS = 2


def home(user: str) -> int:
    return (murmur2(user.encode()) & 0x7FFFFFFF) % PARTITIONS


class Feed:
    """An ingest on a dict store, and the input records with their offsets per topic."""

    def __init__(self, **kw: Any) -> None:
        base: dict[str, Any] = dict(domain=DOMAIN, pairs=("value_presence",), epsilon=1.0,
                                    input_partitions=PARTITIONS)
        base.update(kw)
        self.s = s = Settings(**base)
        rules = EventRules(domain=s.domain, grid_log2=s.grid_log2, dedup_window=s.dedup_window,
                           auto_join=False, known_groups=frozenset({"g"}), default_group="g")
        self.metrics = Metrics.create()
        self.store = MemoryStore()
        self.ingest = Ingest(s, rules, self.metrics, self.store)
        self.next_offset: dict[tuple[str, int], int] = {}

    def record(self, topic: str, user: str, doc: dict[str, Any]) -> Record:
        p = home(user)
        off = self.next_offset.get((topic, p), 0)
        self.next_offset[topic, p] = off + 1
        return Record(topic, p, user.encode(), json.dumps({"user_id": user, **doc}).encode(),
                      off)

    def join(self, user: str, ts: float) -> Record:
        return self.record("membership", user, {"event": "join", "ts": ts})

    def leave(self, user: str, ts: float) -> Record:
        return self.record("membership", user, {"event": "leave", "ts": ts})

    def report(self, user: str, value: float, rid: str, ts: float) -> Record:
        return self.record("reports", user, {"value": value, "report_id": rid, "ts": ts})

    def state(self, user: str) -> UserState:
        return UserState.from_stored(self.store.users[user])

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value

    def exact_sum_units(self) -> int:
        return sum(a.sum_units for a in self.store.aggregates.values())


def test_a_report_before_its_join_is_held_then_counted_at_the_join() -> None:
    f = Feed()
    assert f.ingest.handle_batch([f.report("a", 2.0, "r1", 1.0)]) == []
    assert not f.state("a").present and len(f.state("a").held) == 1
    assert f.sample("pufferfish_reports_held") == 1
    assert f.sample("pufferfish_events_applied_total", kind="report") == 0
    assert f.ingest.handle_batch([f.join("a", 3.0)]) == []  # the join came later than the report
    st = f.state("a")
    assert st.present and st.held == () and st.counts == (0, 0, 1, 0)
    assert st.value_units == 2 * 1024  # grid 2**-10
    assert f.exact_sum_units() == 2 * 1024
    assert f.sample("pufferfish_events_applied_total", kind="report") == 1
    assert f.sample("pufferfish_reports_held") == 0


def test_a_report_produced_before_the_leave_changes_nothing_and_is_not_refused() -> None:
    f = Feed()
    f.ingest.handle_batch([f.join("a", 1.0), f.report("a", 3.0, "r1", 2.0), f.leave("a", 5.0)])
    assert f.ingest.handle_batch([f.report("a", 1.0, "r2", 4.0)]) == []
    assert f.state("a").counts == (0, 0, 0, 1) and f.state("a").held == ()
    assert f.sample("pufferfish_events_ignored_total", reason="late_after_leave") == 1
    assert f.sample("pufferfish_events_rejected_total", reason="not_present") == 0
    assert f.exact_sum_units() == 0


def test_a_report_whose_user_never_joins_is_dead_lettered_after_the_grace(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest_module, "time", FixedClock)
    f = Feed(join_grace_seconds=0.2)
    rec = f.report("a", 1.0, "r1", 1.0)
    assert f.ingest.handle_batch([rec]) == []
    FixedClock.now += 0.19
    assert f.ingest.expire_held([home("a")]) == []  # not yet
    FixedClock.now += 0.02
    (letter,) = f.ingest.expire_held([0, 1])
    assert (letter.topic, letter.reason) == ("reports", "not_present")
    assert (letter.partition, letter.offset) == (rec.message.partition, rec.message.offset)
    assert letter.detail is not None and "join_grace_seconds=0.2" in letter.detail
    assert json.loads(letter.raw or b"") == json.loads(rec.message.value or b"")
    assert f.state("a").held == () and f.sample("pufferfish_reports_held") == 0
    assert f.sample("pufferfish_events_rejected_total", reason="not_present") == 1
    f.ingest.handle_batch([f.join("a", 2.0)])
    assert f.state("a").counts == (0, 0, 0, 0)  # expired: not applied at a later join


def test_held_reports_are_bounded_per_user_only() -> None:
    f = Feed(max_held_reports_per_user=2)
    recs = [f.report("a", 1.0, f"r{i}", float(i)) for i in range(3)]
    letters = f.ingest.handle_batch(recs)
    assert [(x.reason, x.offset) for x in letters] == [("not_present", 2)]
    assert "max_held_reports_per_user=2" in (letters[0].detail or "")
    # 300 other users on the same partition, 2 each: every one held (no bound across users)
    other = [u for u in (f"b{i}" for i in range(700)) if home(u) == home("a")][:300]
    assert len(other) == 300
    recs = [f.report(u, 1.0, f"x{k}", 1.0) for u in other for k in range(2)]
    assert f.ingest.handle_batch(recs) == []
    assert f.sample("pufferfish_reports_held") == 2 + 600


def _neighbour_run(per_user: int, secret: list[float], batch: int) -> tuple[
        dict[str, Any], int, set[tuple[str, str, str]]]:
    """The rest of the population (fixed) and user i's early reports ``secret``: every user's
    reports come before its join; i's are interleaved with the rest's. Returns the rest's
    states, the exact sum without i's contribution, and the rest's dead letters."""
    f = Feed(max_held_reports_per_user=per_user)
    rest = [f"u{n}" for n in range(40)]
    early: list[Record] = []
    for n, user in enumerate(rest):
        for k in range(n % 5):  # 0..4 early reports each: some beyond a small per-user bound
            early.append(f.report(user, float((n + k) % 4), f"{user}-{k}", 1.0 + k))
        if n % 8 == 3:  # i's early reports sit between the rest's
            early.extend(f.report("i", v, f"i-{len(early)}-{v}", 1.5)
                         for v in secret[n // 8::5])
    joins = [f.join(u, 10.0) for u in [*rest, "i"]]
    records = [*early, *joins, f.report("u1", 3.0, "late-u1", 11.0)]
    letters = []
    for start in range(0, len(records), batch):
        letters += f.ingest.handle_batch(records[start:start + batch])
    mine = f.state("i") if "i" in f.store.users else None
    own = (mine.value_units or 0) if mine is not None and mine.present else 0
    states = {u: (f.state(u).present, f.state(u).counts, f.state(u).value_units,
                  f.state(u).held) for u in rest}
    dead = {(json.loads(x.raw or b"{}").get("user_id"), json.loads(x.raw or b"{}").get(
        "report_id"), x.reason) for x in letters}
    return states, f.exact_sum_units() - own, {d for d in dead if d[0] != "i"}


@pytest.mark.parametrize("per_user", [1, 2, 3, 64])
@pytest.mark.parametrize("batch", [1, 7, 500])
def test_user_i_early_reports_never_decide_whether_another_users_count(
        per_user: int, batch: int) -> None:
    """Neighbouring inputs: with and without user i's early reports (3, then 12 of them,
    beyond the per-user bound), every other user's state, dead letters and the exact sum of
    their contributions are the same, at every bound and batch size (docs/privacy.md, "Reports
    held until a join"). The removed worker-wide bound failed this: with the rest holding the
    bound minus 3, i's 3 reports dead-lettered three other users' reports."""
    without = _neighbour_run(per_user, [], batch)
    assert without[1] > 0  # the rest counts
    assert bool(without[2]) == (per_user < 4)  # beyond a small bound some of it is refused
    for secret in ([2.0, 3.0, 1.0], [float(v % 4) for v in range(12)]):
        assert _neighbour_run(per_user, secret, batch) == without


def test_the_newest_ts_is_the_value_an_older_report_only_enters_the_histogram() -> None:
    # docs/design.md, "A user's value: the newest ts wins"; grid 2**-10: value v is v x 1024
    f = Feed()
    assert f.ingest.handle_batch([f.join("a", 1.0), f.report("a", 2.0, "r1", 10.0)]) == []
    assert (f.state("a").value_units, f.state("a").counts) == (2 * 1024, (0, 0, 1, 0))
    # arrives later but was produced earlier (ts 5 < 10): histogram yes, value no
    assert f.ingest.handle_batch([f.report("a", 3.0, "r2", 5.0)]) == []
    st = f.state("a")
    assert (st.value_units, st.value_ts, st.counts) == (2 * 1024, 10.0, (0, 0, 1, 1))
    assert f.exact_sum_units() == 2 * 1024
    # the same ts as the value: the later one wins
    f.ingest.handle_batch([f.report("a", 1.0, "r3", 10.0)])
    assert (f.state("a").value_units, f.state("a").counts) == (1024, (0, 1, 1, 1))
    # newer: replaces
    f.ingest.handle_batch([f.report("a", 0.0, "r4", 11.0)])
    assert (f.state("a").value_units, f.state("a").value_ts) == (0, 11.0)
    assert f.state("a").counts == (1, 1, 1, 1) and f.exact_sum_units() == 0
    # held reports in any arrival order: applied oldest ts first at the join, the newest wins
    f.ingest.handle_batch([f.report("b", 3.0, "b1", 7.0), f.report("b", 1.0, "b2", 4.0)])
    f.ingest.handle_batch([f.join("b", 1.0)])
    assert (f.state("b").value_units, f.state("b").counts) == (3 * 1024, (0, 1, 0, 1))
    assert f.exact_sum_units() == 3 * 1024


def test_grace_zero_refuses_at_once() -> None:
    f = Feed(join_grace_seconds=0)
    (letter,) = f.ingest.handle_batch([f.report("a", 1.0, "r1", 1.0)])
    assert letter.reason == "not_present" and letter.offset == 0


def test_a_replay_of_any_length_is_recognised_by_offset() -> None:
    """1,000 reports of one user (far beyond dedup_window = 64), then the whole span again
    (a crash replay): the histogram equals the truth."""
    f = Feed()
    rng = random.Random(7)
    values = [rng.choice(DOMAIN) for _ in range(1000)]
    records = [f.join("a", 0.0)] + [f.report("a", v, f"r{i}", 1.0 + i)
                                    for i, v in enumerate(values)]
    for start in range(0, len(records), 100):
        assert f.ingest.handle_batch(records[start:start + 100]) == []
    truth = tuple(values.count(v) for v in DOMAIN)
    assert f.state("a").counts == truth
    for start in range(0, len(records), 333):  # the replay, other batch boundaries
        assert f.ingest.handle_batch(records[start:start + 333]) == []
    assert f.state("a").counts == truth
    assert f.sample("pufferfish_events_ignored_total", reason="replayed") == len(records)
    assert f.exact_sum_units() == int(values[-1] * 1024)


def workload(f: Feed, seed: int) -> list[Record]:
    """Reports racing ahead of joins, leaves, rejoins, duplicates, and a replayed suffix."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(10)]
    out: list[Record] = []
    present: dict[str, bool] = {}
    for k in range(300):
        u = rng.choice(users)
        if rng.random() < 0.2:
            kind = "leave" if present.get(u) else "join"
            present[u] = kind == "join"
            out.append(f.record("membership", u, {"event": kind, "ts": float(k)}))
        else:
            rid = f"r{rng.randrange(k + 1)}" if rng.random() < 0.1 else f"r{k}"
            out.append(f.report(u, rng.choice(DOMAIN), rid, float(k + rng.randrange(-5, 5))))
    return out + out[-40:]  # a replayed suffix (same offsets)


def without_arrival(users: dict[str, Any]) -> dict[str, Any]:
    """The stored states, held reports without the worker's clock (the batches' differ)."""
    out = {}
    for user, raw in users.items():
        doc = json.loads(raw)
        doc["held"] = [h[:-1] for h in doc.get("held", ())]
        out[user] = doc
    return out


def test_batch_boundaries_do_not_change_the_outcome() -> None:
    results = []
    for size in (1, 7, 300):
        f = Feed()
        records = workload(f, seed=3)
        letters = []
        for start in range(0, len(records), size):
            letters += f.ingest.handle_batch(records[start:start + size])
        results.append((without_arrival(f.store.users), [tuple(x) for x in letters],
                        f.exact_sum_units(),
                        f.sample("pufferfish_events_ignored_total", reason="replayed")))
    assert results[0] == results[1] == results[2]
    assert results[0][3] == 40


def test_one_topic_for_both_kinds_keeps_the_producers_order() -> None:
    f = Feed(topic_membership="reports")
    records = [f.record("reports", "a", {"event": "join", "ts": 1.0}),
               f.report("a", 3.0, "r1", 2.0),
               f.record("reports", "a", {"event": "leave", "ts": 3.0}),
               f.report("a", 1.0, "r2", 2.5)]  # produced before the leave
    assert f.ingest.handle_batch(records) == []
    st = f.state("a")
    assert not st.present and st.counts == (0, 0, 0, 1) and st.left_ts == 3.0
    assert f.sample("pufferfish_events_applied_total", kind="membership") == 2
    assert f.sample("pufferfish_events_ignored_total", reason="late_after_leave") == 1
    assert f.ingest.handle_batch(records) == []  # a replay: one offset sequence for the topic
    assert f.sample("pufferfish_events_ignored_total", reason="replayed") == 4
