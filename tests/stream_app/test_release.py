"""The release agent's logic on a real broker, without Faust: budget, journal restore, theta 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stream_app.broker import EmbeddedBroker, create_topics
from stream_app.metrics import Metrics
from stream_app.models import Partial
from stream_app.release import Releaser, combine, read_journal
from stream_app.settings import Settings
from tests.kafka_helpers import consume_all, json_values

pytestmark = pytest.mark.integration


def partial(p: int, units: int, theta: float, spread: float, pair: str | None = "x") -> Partial:
    return Partial(partition=p, sum_units=units, theta=theta, spread=spread, binding_pair=pair,
                   newest_ts=1.0)


def test_combine_is_exact_in_grid_units() -> None:
    parts = {0: partial(0, 3, 1.0, 2.0, "a"), 1: partial(1, -1, 4.0, 1.0, "b"),
             2: partial(2, 10**20, 0.5, 0.5)}
    total, theta, spread, binding, newest = combine(parts)
    assert (total, theta, spread, binding, newest) == (2 + 10**20, 4.0, 2.0, "b", 1.0)
    assert combine({}) == (0, 0.0, 0.0, None, 0.0)


def settings(broker: EmbeddedBroker, **kw: object) -> Settings:
    base: dict[str, object] = dict(
        broker=broker.url, domain=[0, 1, 2], epsilon=1.0, grid_log2=-2, metrics_port=None,
        journal_quiet_seconds=0.3, pairs=["value_presence"],
    )
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


async def _budget_and_restore(broker: EmbeddedBroker, data_dir: Path) -> None:
    await create_topics(broker.bootstrap, {"releases": 1})
    s = settings(broker, budget_total=3.5, data_dir=data_dir)
    parts = {0: partial(0, 10, 2.0, 2.0), 1: partial(1, 6, 1.0, 1.0)}  # X = 16 * 0.25 = 4
    m1 = Metrics.create()
    owner = {"yes": True}
    r1 = Releaser(s, m1, lambda: parts, lambda: owner["yes"])
    try:
        owner["yes"] = False
        assert await r1.release_once() is None  # not the owner: nothing happens
        owner["yes"] = True
        first = [await r1.release_once() for _ in range(2)]
        assert [r.seq for r in first if r] == [1, 2]
        assert [r.epsilon_spent for r in first if r] == [1.0, 2.0]
        assert all(r is not None and r.theta == 2.0 and r.binding_pair == "x" for r in first)
    finally:
        await r1.stop()

    # a restarted releaser continues from the journal: same budget, next seq, no republish
    m2 = Metrics.create()
    r2 = Releaser(s, m2, lambda: parts, lambda: True)
    try:
        third = await r2.release_once()
        assert third is not None and third.seq == 3 and third.epsilon_spent == 3.0
        assert third.epsilon_remaining == 0.5
        assert await r2.release_once() is None  # 3 + 1 > 3.5: refused
        assert r2.exhausted and m2.budget_exhausted._value.get() == 1
        assert await r2.release_once() is None
    finally:
        await r2.stop()
    journal = await read_journal(s)
    assert [r.seq for r in journal] == [1, 2, 3]
    assert [r.epsilon_spent for r in journal] == [1.0, 2.0, 3.0]
    for r in journal:
        assert (r.noisy_sum * 4).is_integer()  # on the 2**-2 grid

    # a third releaser sees the exhausted budget only when the next charge does not fit
    r3 = Releaser(s, Metrics.create(), lambda: parts, lambda: True)
    try:
        assert await r3.release_once() is None and r3.last_seq == 3
    finally:
        await r3.stop()


def test_budget_exhaustion_and_journal_restore(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_budget_and_restore(broker, tmp_path / "data"))


async def _zero_theta_and_every(broker: EmbeddedBroker, data_dir: Path) -> None:
    await create_topics(broker.bootstrap, {"releases": 1})
    s = settings(broker, release_every_events=5, data_dir=data_dir)
    parts: dict[int, Partial] = {0: partial(0, 4, 0.0, 0.0, None)}
    r = Releaser(s, Metrics.create(), lambda: parts, lambda: True)
    try:
        assert await r.release_once() is None  # theta 0 would expose the exact sum
        parts[0] = partial(0, 4, 1.0, 1.0)
        await r.count_events(3)
        assert r.last_seq == 0
        await r.count_events(2)  # 5 new events: an early release
        assert r.last_seq == 1
    finally:
        await r.stop()
    got = json_values(await consume_all(broker.bootstrap, "releases", timeout=30, min_count=1))
    assert [g["seq"] for g in got] == [1] and got[0]["theta"] == 1.0


def test_zero_theta_and_release_every_events(broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_zero_theta_and_every(broker, tmp_path / "data"))
