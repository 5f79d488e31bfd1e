"""Partition aggregates rebuilt from stored states a slice at a time (stream_app/domain/rebuild.py)
equal the aggregate kept incrementally and the group shares computed here from scratch."""

from __future__ import annotations

import random
from dataclasses import replace

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.rebuild import AggregateBuilder
from stream_app.domain.rejection import Rejected
from stream_app.domain.state import UserState, apply_membership, apply_report
from tests.stream_app.domain.test_state import DOMAIN, _group_shares, _nonzero, mem, rep, rules


def _random_users(seed: int, partitions: int) -> tuple[dict[str, UserState],
                                                      dict[int, PartitionAggregate]]:
    """Users of `partitions` partitions after random joins, leaves and reports, and each
    partition's aggregate kept incrementally as the input path keeps it."""
    rng = random.Random(seed)
    r = rules(auto_join=False, dedup_window=1000)
    aggs = {p: PartitionAggregate(partition=p) for p in range(partitions)}
    users: dict[str, UserState] = {}
    for i in range(3000):
        uid = f"u{rng.randrange(120)}"
        p = int(uid[1:]) % partitions
        old = users.get(uid)
        try:
            if rng.random() < 0.3:
                ev = "leave" if old is not None and old.present else "join"
                new = apply_membership(old, mem(uid, ev, rng.choice(["g1", "g2"])), p, r)
            else:
                new = apply_report(old, rep(uid, rng.choice(DOMAIN), f"r{i}", ts=i), p, r)
        except Rejected:
            continue
        aggs[p].apply(old, new)
        aggs[p].note_event(new.value_ts)
        users[uid] = new
    # a few users hold reports until they join (the expiry sweep's index)
    for uid in sorted(users)[:5]:
        st = users[uid] = replace(users[uid], held=((1.0, 2.0, "h", 0, 1, 3.0),) * 2)
        aggs[st.partition].note_held(uid, 2)
    return users, aggs


def test_rebuild_in_slices_equals_the_incremental_aggregate() -> None:
    users, aggs = _random_users(seed=5, partitions=3)
    rows = [(uid, st.to_bytes()) for uid, st in users.items()]
    random.Random(1).shuffle(rows)
    builder = AggregateBuilder([0, 2])  # partition 1's users are skipped
    at = 0
    for size in (1, 7, 0, 50, 1000):  # uneven slices, an empty one
        builder.add(rows[at:at + size])
        at += size
    built = builder.built()
    assert set(built) == {0, 2}
    for p in (0, 2):
        mine = {u: st for u, st in users.items() if st.partition == p}
        want_sum = sum(st.value_units for st in mine.values()
                       if st.present and st.value_units is not None)
        assert built[p].sum_units == want_sum == aggs[p].sum_units
        assert _nonzero(built[p].group_units) == _group_shares(mine) \
            == _nonzero(aggs[p].group_units)
        assert built[p].held_users == aggs[p].held_users
        assert len(built[p].held_users) == sum(1 for st in mine.values() if st.held)
        assert built[p].newest_ts == max(st.value_ts or 0.0 for st in mine.values())
        assert built[p].dirty


def test_rebuild_skips_deleted_users_and_matches_the_reference_rebuild() -> None:
    users, _ = _random_users(seed=9, partitions=2)
    rows: list = [(uid, st.to_bytes()) for uid, st in users.items()] + [("gone", None)]
    builder = AggregateBuilder([1])
    builder.add(rows)
    ref = PartitionAggregate.rebuild(1, list(users.items()))
    got = builder.built()[1]
    assert (got.sum_units, _nonzero(got.group_units), got.newest_ts, got.held_users) == \
        (ref.sum_units, _nonzero(ref.group_units), ref.newest_ts, ref.held_users)
