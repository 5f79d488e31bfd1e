"""What a partition aggregate is rebuilt from on a RocksDB store (stream_app/faust_adapter/
user_table.py): the users of one partition's database with the writes still waiting for their
acknowledgement over them, in slices; the checkpoint a clean stop leaves beside the database;
the current event a write to one partition's database needs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.draft import Stored

Row = tuple[str, Stored]


class At:
    """The current event as a RocksDB store reads it: the partition to write to."""

    def __init__(self, partition: int) -> None:
        self.message = SimpleNamespace(partition=partition)


def slices(rows: Iterable[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def rocksdb_rows(store: Any, partitions: list[int], unacked: dict[str, tuple[bytes, int]]
                 ) -> Iterator[Row]:
    """The users of these partitions' databases (RocksDB iterators read a snapshot), the
    pending writes (taken now) over them."""
    pending = {orjson.dumps(u): (u, v) for u, (v, p) in unacked.items() if p in partitions}
    items = [store._visible_items(store._db_for_partition(p)) for p in partitions]
    return _merged(items, pending)


def _merged(items: list[Iterator[tuple[bytes, bytes]]],
            pending: dict[bytes, tuple[str, bytes]]) -> Iterator[Row]:
    for it in items:
        for key, value in it:
            if key in pending:
                continue
            yield orjson.loads(key), value
    yield from pending.values()


def checkpoint_path(store: Any, partition: int) -> Path:
    db = Path(store.partition_path(partition))
    return db.with_name(f"{db.name}.aggregate.json")


def write_checkpoint(store: Any, agg: PartitionAggregate, offset: int | None) -> None:
    """The aggregate as it is, tree mode's admission state included (its window, the users
    whose admitted contribution differs from their raw one, the window before's final sum): a
    restart that read only the sums would take every held change as admitted, one move more
    than w per such user (docs/privacy.md, "Continual release", "On the worker")."""
    doc = {"offset": offset, "sum_units": agg.sum_units, "group_units": agg.group_units,
           "group_totals": agg.group_totals,
           "newest_ts": agg.newest_ts, "held_users": agg.held_users,
           "tree": {"window": agg.window, "gaps": agg.gaps, "gap_units": agg.gap_units,
                    "previous_units": agg.previous_units, "durable": agg.durable}}
    path = checkpoint_path(store, agg.partition)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def read_checkpoint(store: Any, partition: int, offset: int | None
                    ) -> PartitionAggregate | None:
    """The checkpoint of `partition` if it was written at the database's persisted changelog
    `offset` (none: None); the file is removed either way."""
    path = checkpoint_path(store, partition)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        doc = None
    finally:
        path.unlink(missing_ok=True)
    if not isinstance(doc, dict) or doc.get("offset") != offset or "tree" not in doc \
            or "group_totals" not in doc:
        return None  # (a checkpoint without the admission state or the group totals: rebuilt)
    tree = doc["tree"]
    durable = tree["durable"]
    return PartitionAggregate(
        partition=partition, sum_units=int(doc["sum_units"]),
        group_units={g: [int(u) for u in v] for g, v in doc["group_units"].items()},
        group_totals={g: [int(v[0]), int(v[1])] for g, v in doc["group_totals"].items()},
        newest_ts=float(doc["newest_ts"]), dirty=True,
        held_users={u: int(c) for u, c in doc["held_users"].items()},
        window=int(tree["window"]),
        gaps={u: (int(g[0]), int(g[1]), None if g[2] is None else int(g[2]))
              for u, g in tree["gaps"].items()},
        gap_units=int(tree["gap_units"]),
        previous_units=None if tree["previous_units"] is None else int(tree["previous_units"]),
        durable=None if durable is None else (int(durable[0]), int(durable[1]),
                                              None if durable[2] is None else int(durable[2]),
                                              int(durable[3])))
