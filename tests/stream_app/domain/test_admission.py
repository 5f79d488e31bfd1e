"""The tree's contribution bound on the real input path (Ingest on a dict store) against
``core.tree_sensitivity.admitted``, an independent reference written on per-tick sequences.

Each user's history is random joins, leaves and reports (one record per tick, across several
windows of the clock); the raw contribution is modelled here (the latest value while present,
else 0) and the reference gives the admitted one per tick. The partition aggregate's admitted
sum must be the reference's sum after every record, and the held-changes counter the number of
changes the reference held.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest

from pufferfish_core.tree_sensitivity import admitted
from stream_app.domain.admission import admission_for
from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.batch import Record
from stream_app.domain.rebuild import AggregateBuilder
from stream_app.domain.state import UserState
from tests.stream_app.domain.test_ingest import DOMAIN, App, home_of, settings

GRID = 1024  # grid units of 1.0 at grid_log2 -10
WINDOW = 100.0


def tree_app(w: int) -> App:
    s = settings(release_mechanism="tree", max_changes_per_window=w,
                 budget_window_seconds=WINDOW, release_period_seconds=10.0)
    app = App(s)
    adm = admission_for(s.release_mechanism, w, s.budget_window_seconds,
                        s.release_period_seconds)
    assert adm is not None and adm.lead_seconds == 1.0
    object.__setattr__(app.rules, "admission", adm)  # as the worker builds its rules
    app.ingest.applier.rules = app.rules
    return app


def record(user: str, doc: dict[str, Any]) -> tuple[str, bytes]:
    topic = "membership" if "event" in doc else "reports"
    return topic, json.dumps({"user_id": user, **doc}).encode()


def held_by_reference(raw: list[int], out: list[int]) -> int:
    """Ticks where the raw contribution changed to something the reference did not admit."""
    return sum(1 for t in range(1, len(raw))
               if raw[t] != raw[t - 1] and out[t] == out[t - 1] and raw[t] != out[t - 1])


@pytest.mark.parametrize("w", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_admitted_sum_is_the_reference_after_every_record(
        w: int, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed * 10 + w)
    clock = [1000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    app = tree_app(w)
    users = [u for u in (f"u{i}" for i in range(40)) if home_of(u) == 0][:4]
    present = dict.fromkeys(users, False)
    value = dict.fromkeys(users, 0)  # units of the latest report (0: none yet)
    # per user, per window: the raw contribution at the window's base and after each record
    raw: dict[tuple[str, int], list[int]] = {}
    held = 0
    ts = 1.0
    for _ in range(120):
        clock[0] += rng.choice([0.5, 3.0, 9.0])  # windows of 100 s: several per run
        window = int((clock[0] + 1.0) // WINDOW)  # the lead: 1 s before the boundary
        user = rng.choice(users)
        ts += 1.0
        if not present[user]:
            doc: dict[str, Any] = {"event": "join", "ts": ts}
        elif rng.random() < 0.15:
            doc = {"event": "leave", "ts": ts}
        else:
            doc = {"value": rng.choice(DOMAIN), "report_id": f"r{ts}", "ts": ts}
        before = value[user] if present[user] else 0
        seq = raw.setdefault((user, window), [before])
        assert app.handle(*record(user, doc)[:1], 0, user.encode(), record(user, doc)[1]) is None
        if "value" in doc:
            value[user] = int(doc["value"] * GRID)
        elif doc["event"] == "join":
            present[user] = True
        else:
            present[user] = False
        seq.append(value[user] if present[user] else 0)
        expected = sum(admitted(raw[(u, window)], w)[-1] if (u, window) in raw
                       else (value[u] if present[u] else 0) for u in users)
        agg = app.aggregates[0]
        assert agg.window == window
        assert agg.admitted_units == expected
        assert agg.sum_units == sum(value[u] if present[u] else 0 for u in users)
    for (_, _), seq in raw.items():
        held += held_by_reference(seq, admitted(seq, w))
    assert app.metrics.tree_changes_held._value.get() == held
    if w == 0:
        assert held > 0  # the run did hold changes (the check above can fail)
    # the aggregate rebuilt from the stored states (a new owner) has the same admitted sum
    stored = [(u, UserState.from_stored(v)) for u, v in app.users.items()]
    rebuilt = PartitionAggregate.rebuild(0, stored)
    agg = app.aggregates[0]
    rebuilt.roll(agg.window)
    assert rebuilt.admitted_units == agg.admitted_units
    # and the window before's final sum, from the states (late ticks after a takeover)
    assert agg.previous_units is not None and rebuilt.previous_units == agg.previous_units
    builder = AggregateBuilder([0])  # the worker's rebuild, a slice at a time
    builder.add(list(app.users.items()))
    sliced = builder.built()[0]
    sliced.roll(agg.window)
    assert (sliced.admitted_units, sliced.previous_units) == \
        (agg.admitted_units, agg.previous_units)


def test_independent_mode_stores_no_admission_state() -> None:
    app = App(settings())
    assert app.rules.admission is None
    user = next(u for u in (f"u{i}" for i in range(40)) if home_of(u) == 0)
    for doc in ({"event": "join", "ts": 1.0}, {"value": 1.0, "report_id": "r", "ts": 2.0}):
        assert app.handle(*record(user, doc)[:1], 0, user.encode(), record(user, doc)[1]) is None
    assert json.loads(app.users[user])["present"] is True  # type: ignore[arg-type]
    assert "a" not in json.loads(app.users[user])  # type: ignore[arg-type]
    assert app.aggregates[0].window == -1 and app.aggregates[0].admitted_units == GRID


def test_roll_keeps_the_final_admitted_sum_of_the_window_before() -> None:
    agg = PartitionAggregate(partition=0, sum_units=50)
    agg.roll(3)
    assert agg.previous_units == 50  # no user state: window 2 ended at the raw sum
    agg.note_admitted("a", [3, 10, 2], 30)  # admitted 10, raw 30: a held change
    assert agg.admitted_units == 30
    agg.roll(4)
    assert agg.previous_units == 30 and agg.admitted_units == 50  # a new base: raw again
    agg.roll(6)  # window 5 without any record here: it ended at its base, the raw sum
    assert agg.previous_units == 50 and agg.admitted_units == 50
    agg.roll(5)  # never back
    assert agg.window == 6


@pytest.mark.parametrize("seed", [4, 5])
def test_one_batch_admits_what_record_by_record_admits(seed: int) -> None:
    """The fused path (common_report) and the general path admit alike, whatever the batch."""
    rng = random.Random(seed)
    users = [u for u in (f"u{i}" for i in range(60)) if home_of(u) == 0][:6]
    present = dict.fromkeys(users, False)
    records = []
    for n in range(80):
        user = rng.choice(users)
        if not present[user] or rng.random() < 0.1:
            doc: dict[str, Any] = {"event": "leave" if present[user] else "join", "ts": 1.0 + n}
            present[user] = not present[user]
        else:
            doc = {"value": rng.choice(DOMAIN), "report_id": f"r{n}", "ts": 1.0 + n}
        topic, raw = record(user, doc)
        records.append(Record(topic, 0, user.encode(), raw))
    batched, single = tree_app(1), tree_app(1)
    batched.handle_batch(records)
    for r in records:
        single.handle_batch([r])
    assert {u: json.loads(v) for u, v in batched.users.items()} == \
        {u: json.loads(v) for u, v in single.users.items()}  # type: ignore[arg-type]
    assert batched.aggregates[0].admitted_units == single.aggregates[0].admitted_units
    held = batched.metrics.tree_changes_held._value.get()
    assert held == single.metrics.tree_changes_held._value.get() and held > 0


def test_a_rebuilt_aggregate_always_knows_the_window_before() -> None:
    """Whether a late tick can read the window before's final sum must not depend on users'
    data: a rebuilt partition tells it even when a stored state is of a later window (another
    worker's clock ahead: its own window before's final) or of the older three-field format
    (its raw contribution)."""
    agg = PartitionAggregate(partition=0, sum_units=50)  # raw: a 30, b 20
    agg.note_admitted("a", [7, 10, 2, 40], 30)  # window 7 (clock ahead), 6 ended at 40
    agg.note_admitted("b", [5, 4, 1], 20)  # older format: no window before
    agg.roll(5)
    assert agg.previous_units == 40 + 20
