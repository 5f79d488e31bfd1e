"""Offset gaps recorded without Faust's whole-tree merge (stream_app/faust_adapter/gaps.py):
the committed offsets stay exactly Faust's, the cost per gap stays flat."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP
from intervaltree import IntervalTree

from stream_app.faust_adapter.app import new_app
from stream_app.settings import Settings

TP0 = TP("reports", 0)


def fresh_consumer(name: str) -> Any:
    app = new_app(Settings(), name, broker="kafka://127.0.0.1:1", store="memory://",
                  web_enabled=False)
    return app.consumer


def commit(consumer: Any) -> int | None:
    """What a commit computes and records (Faust's ``_new_offset`` then ``_committed_offset``)."""
    offset = consumer._new_offset(TP0)
    if offset is not None and consumer._should_commit(TP0, offset):
        consumer._committed_offset[TP0] = offset
    return offset


async def replay(consumer: Any, add_gap: Any, steps: list[tuple[str, int, int]]) -> list[Any]:
    out = []
    for kind, a, b in steps:
        if kind == "ack":
            consumer._acked[TP0].append(a)
            consumer._acked_index[TP0].add(a)
        elif kind == "gap":
            await add_gap(consumer, TP0, a, b)
        else:
            out.append(commit(consumer))
    return out


def transactional_steps(seed: int, transactions: int = 300) -> list[tuple[str, int, int]]:
    """Transactions of 1-5 records, each followed by its marker (a gap), some gaps sent again
    (a seek back re-reads them) or spanning several markers, commits now and then."""
    rng = random.Random(seed)
    steps: list[tuple[str, int, int]] = []
    offset = 0
    for _ in range(transactions):
        for _ in range(rng.randint(1, 5)):
            steps.append(("ack", offset, 0))
            offset += 1
        steps.append(("gap", offset, offset))
        if rng.random() < 0.1:  # the same gap again, and one overlapping it
            steps.append(("gap", offset, offset))
            steps.append(("gap", max(0, offset - 3), offset))
        offset += 1
        if rng.random() < 0.2:
            steps.append(("commit", 0, 0))
    steps.append(("commit", 0, 0))
    return steps


async def test_commits_are_exactly_fausts() -> None:
    for seed in range(5):
        steps = transactional_steps(seed)
        ours = await replay(fresh_consumer(f"gaps-ours-{seed}"),
                            lambda c, tp, a, b: c._add_gap(tp, a, b), steps)
        stock = await replay(fresh_consumer(f"gaps-stock-{seed}"), FaustConsumer._add_gap, steps)
        assert ours == stock
        assert ours[-1] is not None and ours[-1] > 0


async def test_no_gap_merges_the_whole_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """5,000 markers, no commit in between (a backlog drained between two commits): Faust's
    ``merge_overlaps()`` of the whole tree per gap is quadratic (its last 1,000 of 5,000 gaps
    took 21x its first 1,000, measured 2026-11-28); here no gap calls it, and the tree still
    holds every gap offset in intervals that never overlap."""
    merges = 0

    def counted(tree: IntervalTree, *args: Any, **kwargs: Any) -> None:
        nonlocal merges
        merges += 1

    monkeypatch.setattr(IntervalTree, "merge_overlaps", counted)
    consumer = fresh_consumer("gaps-flat")
    for k in range(5_000):
        await consumer._add_gap(TP0, 2 * k + 1, 2 * k + 1)
    await consumer._add_gap(TP0, 3, 9)  # over four of them and the records between
    tree = sorted(consumer._gap[TP0])
    assert merges == 0
    assert all(a.end <= b.begin for a, b in zip(tree, tree[1:], strict=False))
    offsets = {o for iv in tree for o in range(iv.begin, iv.end)}
    assert offsets == {2 * k + 1 for k in range(5_000)} | set(range(3, 10))


def test_the_consumer_uses_the_cheap_gaps() -> None:
    consumer = fresh_consumer("gaps-which")
    assert type(consumer)._add_gap is not FaustConsumer._add_gap
    assert asyncio.iscoroutinefunction(type(consumer)._add_gap)
