"""The users table on Faust's stores, without a broker (stream_app/faust_adapter/user_table.py):
aggregates rebuilt in slices that let timers run, only acknowledged states on RocksDB's disk,
and the same aggregates from the disk after a restart."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import faust
import pytest

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.draft import Draft
from stream_app.domain.state import UserState
from stream_app.faust_adapter.user_table import REBUILD_SLICE, UserTable

STORES = ("memory://", "rocksdb://")
PARTITIONS = 4


class At:
    """A record's event as the table reads it: its partition."""

    def __init__(self, partition: int) -> None:
        self.message = type("Message", (), {"partition": partition})()


def new_table(store: str, data_dir: Path) -> UserTable:
    app = faust.App("user-table-test", store=store, datadir=str(data_dir), autodiscover=False)
    schema = faust.Schema(key_serializer="json", value_serializer="raw")
    return UserTable(app.Table("users", default=None, partitions=PARTITIONS, schema=schema))


def stored_user(i: int, rng: random.Random) -> tuple[str, int, bytes]:
    partition = i % PARTITIONS
    d = Draft(partition)
    d.exists, d.present, d.group = True, rng.random() < 0.9, rng.choice(["a", "b"])
    d.value_units, d.value_ts = rng.randrange(6) * 1024, float(i)
    d.counts = [rng.randrange(3) for _ in range(6)]
    return f"user-{i}", partition, d.to_bytes()


def fill(table: UserTable, n: int, seed: int = 1) -> dict[str, bytes]:
    """n users saved and acknowledged (as after their changelog records were written)."""
    rng = random.Random(seed)
    users = {}
    for i in range(n):
        user_id, partition, value = stored_user(i, rng)
        table.save(user_id, value, At(partition))
        table.acknowledged({(user_id, partition): value})
        users[user_id] = value
    table.take_writes()
    return users


View = tuple[int, dict[str, list[int]], dict[str, list[int]]]


def reference(users: dict[str, bytes], partition: int) -> View:
    return view(PartitionAggregate.rebuild(partition, [(u, UserState.from_stored(v))
                                                       for u, v in users.items()]))


def view(agg: PartitionAggregate) -> View:
    """The sums, the group histograms and the group totals (release_by_group)."""
    return (agg.sum_units, {g: v for g, v in agg.group_units.items() if any(v)},
            {g: v for g, v in agg.group_totals.items() if any(v)})


async def close(table: UserTable) -> None:
    await table.users.data.stop()  # RocksDB: the databases are closed (their locks freed)


@pytest.mark.parametrize("store", STORES)
async def test_a_rebuild_lets_a_timer_tick_between_slices(store: str, tmp_path: Path) -> None:
    table = new_table(store, tmp_path)
    n = 12 * REBUILD_SLICE
    users = fill(table, n)
    ticks = 0

    def tick() -> None:  # a callback of every event-loop iteration (what timers need)
        nonlocal ticks
        ticks += 1
        handle[0] = loop.call_soon(tick)

    loop = asyncio.get_running_loop()
    handle = [loop.call_soon(tick)]
    try:
        await table.ensure(range(PARTITIONS))
    finally:
        handle[0].cancel()
    # the loop ran between every two slices of REBUILD_SLICE users (at once: 1 or 2 ticks)
    assert ticks >= 12, ticks
    for p in range(PARTITIONS):
        assert view(table.aggregates[p]) == reference(users, p)
    await close(table)


async def test_callers_share_one_rebuild_and_an_invalidate_drops_it(tmp_path: Path) -> None:
    table = new_table("memory://", tmp_path)
    users = fill(table, 3 * REBUILD_SLICE)
    first = asyncio.ensure_future(table.ensure([0, 1]))
    await asyncio.sleep(0)  # the rebuild has begun
    table.invalidate()  # a rebalance: the rebuild in progress is dropped, its waiter returns
    await first
    assert table.aggregates == {}
    await asyncio.gather(table.ensure([0, 1]), table.ensure([1]))  # one rebuild for both
    assert sorted(table.aggregates) == [0, 1]
    assert view(table.aggregates[1]) == reference(users, 1)


async def test_rocksdb_keeps_only_acknowledged_states(tmp_path: Path) -> None:
    table = new_table("rocksdb://", tmp_path)
    rng = random.Random(2)
    user_id, partition, old = stored_user(1, rng)
    _, _, new = stored_user(1, rng)
    store: Any = table.users.data

    def on_disk() -> bytes | None:
        return dict(store._visible_items(store._db_for_partition(partition))).get(b'"user-1"')

    table.save(user_id, old, At(partition))
    assert on_disk() is None and table.load(user_id, At(partition)) == old
    table.save(user_id, new, At(partition))  # written again before the first was acknowledged
    table.acknowledged({(user_id, partition): old})
    assert on_disk() == old  # what the changelog has
    assert table.load(user_id, At(partition)) == new  # the newer state is still the user's
    assert table.unacked
    table.acknowledged({(user_id, partition): new})
    assert on_disk() == new and not table.unacked
    await close(table)


async def test_rocksdb_aggregates_from_the_disk_after_a_restart(tmp_path: Path) -> None:
    table = new_table("rocksdb://", tmp_path)
    users = fill(table, 3000)
    user_id, partition, value = stored_user(3000, random.Random(9))
    table.save(user_id, value, At(partition))  # never acknowledged: not on disk
    await table.ensure(range(PARTITIONS))
    assert view(table.aggregates[partition]) == reference({**users, user_id: value}, partition)
    await close(table)  # the process ends: its unacknowledged state is gone

    restarted = new_table("rocksdb://", tmp_path)
    assert restarted.begin(range(PARTITIONS)) == []  # a timer starts the rebuild of all four
    last = PARTITIONS - 1
    await restarted.ensure([last])  # a batch of the last partition: built next, waited for
    assert last in restarted.aggregates and 2 not in restarted.aggregates
    await restarted.ensure(range(PARTITIONS))
    assert {p: view(a) for p, a in restarted.aggregates.items()} == \
        {p: reference(users, p) for p in range(PARTITIONS)}
    await close(restarted)


async def test_rocksdb_checkpoint_taken_only_while_the_database_has_not_moved(
    tmp_path: Path,
) -> None:
    import json

    from faust.types import TP

    from stream_app.faust_adapter.stored_rows import checkpoint_path

    table = new_table("rocksdb://", tmp_path)
    users = fill(table, 2000)
    changelog = table.users.changelog_topic.get_topic_name()
    for p in range(PARTITIONS):
        table.users.data.set_persisted_offset(TP(changelog, p), 100 + p)
    await table.ensure(range(PARTITIONS))
    table.save("late", stored_user(5000, random.Random(1))[2], At(0))
    assert table.checkpoint() == []  # a write still waits for its acknowledgement
    table.unacked.clear()
    table.invalidate()
    await table.ensure(range(PARTITIONS))
    assert table.checkpoint() == list(range(PARTITIONS))
    files = {p: checkpoint_path(table.users.data, p) for p in range(PARTITIONS)}
    for p in (0, 1):  # marked: an aggregate read from its file shows the mark
        doc = json.loads(files[p].read_text())
        files[p].write_text(json.dumps({**doc, "sum_units": -1}))
    table.users.data.set_persisted_offset(TP(changelog, 1), 999)  # partition 1 moved on
    await close(table)

    restarted = new_table("rocksdb://", tmp_path)
    await restarted.ensure(range(PARTITIONS))
    got = {p: view(a) for p, a in restarted.aggregates.items()}
    assert got[0][0] == -1  # taken from its checkpoint
    assert got[1] == reference(users, 1)  # its database moved: rebuilt
    assert got[2] == reference(users, 2) and got[3] == reference(users, 3)
    assert not any(f.exists() for f in files.values())  # read once
    await close(restarted)


async def test_rocksdb_checkpoint_keeps_the_tree_admission_state(tmp_path: Path) -> None:
    """A clean restart in tree mode: the checkpoint brings back the users held beyond w, so
    the window's admitted sum is the one before the stop, not the raw sum (issue 42, point 1:
    a checkpoint of the sums alone showed 3 moves of one user with w = 1)."""
    from stream_app.faust_adapter.stored_rows import read_checkpoint, write_checkpoint

    table = new_table("rocksdb://", tmp_path)
    store = table.users.data
    # raw sum 10 units; user "u" admitted 3 less than its raw value in window 5 (a change
    # held), the window before ended at 7
    agg = PartitionAggregate(partition=0, sum_units=10, window=5,
                             gaps={"u": (5, -3, 1), "v": (4, 2, None)}, gap_units=-3,
                             previous_units=7, durable=(5, 7, 7, 10))
    write_checkpoint(store, agg, 100)
    kept = read_checkpoint(store, 0, 100)
    assert kept is not None
    assert kept.admitted_units == 7 and kept.tree_state() == (5, 7, 7, 10)
    assert kept.gaps == {"u": (5, -3, 1), "v": (4, 2, None)} and kept.durable == (5, 7, 7, 10)
    kept.roll(6)  # the next window: its base is the raw sum, the window before ended at 7
    assert (kept.previous_units, kept.admitted_units) == (7, 10)
    await close(table)


async def test_rocksdb_checkpoint_without_the_admission_state_is_not_used(
        tmp_path: Path) -> None:
    """A checkpoint of an older version (the sums only) would lose the held changes: rebuilt."""
    import json

    from stream_app.faust_adapter.stored_rows import checkpoint_path, read_checkpoint

    table = new_table("rocksdb://", tmp_path)
    path = checkpoint_path(table.users.data, 0)
    path.write_text(json.dumps({"offset": 100, "sum_units": 10, "group_units": {},
                                "newest_ts": 0.0, "held_users": {}}))
    assert read_checkpoint(table.users.data, 0, 100) is None
    # nor one without the group totals (release_by_group): they would read as empty groups
    tree = {"window": -1, "gaps": {}, "gap_units": 0, "previous_units": None, "durable": None}
    path.write_text(json.dumps({"offset": 100, "sum_units": 10, "group_units": {},
                                "newest_ts": 0.0, "held_users": {}, "tree": tree}))
    assert read_checkpoint(table.users.data, 0, 100) is None
    path.write_text(json.dumps({"offset": 100, "sum_units": 10, "group_units": {},
                                "group_totals": {"a": [10, 2]}, "newest_ts": 0.0,
                                "held_users": {}, "tree": tree}))
    kept = read_checkpoint(table.users.data, 0, 100)
    assert kept is not None and kept.group_totals == {"a": [10, 2]}
    await close(table)
