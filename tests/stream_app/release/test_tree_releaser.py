"""The releaser in tree mode on a real broker (tansu), without Faust: one tree per window from
the laws in force when it opens, charged once, each node drawn once and journaled in
``topic_tree_nodes``; a new owner mid-window continues the same tree (same base and nodes);
every node scale passes the exact audit of its node."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from pathlib import Path

import pytest

from pufferfish_core.auditor import audit
from pufferfish_core.clock import latest_tick
from pufferfish_core.distribution import Distribution, point_zero
from pufferfish_core.schedule import window_ticks
from pufferfish_core.tree import TreeMechanism, tree_mechanism
from pufferfish_core.tree_sensitivity import coupled_range
from pufferfish_core.vocabulary import PairKind
from stream_app.demo.broker import EmbeddedBroker
from stream_app.domain.models import Partial, PriorsRecord, Release
from stream_app.release.journal import read_journal
from stream_app.release.tree_nodes import NodeRecord
from stream_app.settings import Settings
from tests.oracles import release_noise_sd
from tests.stream_app.release.test_releaser import running, settings

pytestmark = pytest.mark.integration

PERIOD, WINDOW, W, BUDGET = 1.0, 12.0, 2, 2.0
GRID = 4  # grid_log2 -2: 4 units per 1.0


def part(window: int, admitted: int) -> dict[int, Partial]:
    return {0: Partial(partition=0, sum_units=admitted, window=window, admitted_units=admitted,
                       previous_units=0)}


async def tree_settings(broker: EmbeddedBroker, data_dir: Path, partitions: int = 1) -> Settings:
    return await settings(broker, data_dir, ("releases", "priors", "pufferfish-tree-nodes"),
                          release_mechanism="tree", budget_window_seconds=WINDOW,
                          release_period_seconds=PERIOD, max_changes_per_window=W,
                          budget_total=BUDGET, learn_period_seconds=86400 * 366,
                          input_partitions=partitions)


def first_tick_of_a_later_window() -> tuple[int, int]:
    """A window that starts after the releasers do: every tick of it is due later (not
    skipped); its number and first tick."""
    window = math.floor(latest_tick(time.time(), PERIOD) * PERIOD / WINDOW) + 2
    return window, window_ticks(window, PERIOD, WINDOW)[0]


async def _tree(broker: EmbeddedBroker, data_dir: Path) -> None:
    s = await tree_settings(broker, data_dir)
    # a window that starts after the releasers do: every tick of it is due later (not skipped)
    window = math.floor(latest_tick(time.time(), PERIOD) * PERIOD / WINDOW) + 2
    first, last = window_ticks(window, PERIOD, WINDOW)
    ticks = last - first + 1
    assert ticks == 12
    exact = [40 + 4 * (t // 5) for t in range(ticks)]  # admitted sums: two changes in the window
    parts = part(window, exact[0])
    published: list[Release] = []
    for span in (range(0, 7), range(7, ticks)):  # an owner, then a new one mid-window
        async with running(s, parts) as r:
            for t in span:
                parts.update(part(window, exact[t]))
                record = await r.on_clock(first + t)
                assert record is not None, t
                published.append(record)
    # the next window: a new tree, charged again
    parts.update(part(window + 1, 60))
    async with running(s, parts) as r:
        nxt = await r.on_clock(last + 1)
    assert nxt is not None and nxt.window == window + 1 and nxt.charge == BUDGET
    assert nxt.window_tick == 0 and nxt.nodes == ["base"]

    m = tree_mechanism(ticks, W, [PairKind.VALUE_PRESENCE], 2.0, [0.0, 1.0, 2.0], BUDGET, -2)
    nodes = await read_journal(s, s.topic_tree_nodes, NodeRecord)
    mine = [n for n in nodes if n.window == window]
    assert max(Counter(n.node for n in mine).values()) == 1  # no node drawn twice
    noise = {n.node: n.units for n in mine}
    assert {(n.scale, n.arity, n.ticks) for n in mine} == {(m.scale, m.shape.arity, ticks)}
    for t, r in enumerate(published):
        assert (r.mechanism, r.tick, r.window, r.window_tick) == ("tree", first + t, window, t)
        assert r.nodes == m.draws(t) and r.arity == m.shape.arity
        assert r.max_changes_per_window == W and r.theta == m.scale
        assert r.charge == (BUDGET if t == 0 else 0.0)  # the window's charge, once
        assert r.epsilon_spent == BUDGET and r.epsilon_remaining == 0.0  # never above it
        # the exact admitted sum plus the journal's noise of the release's nodes, on the grid
        assert r.noisy_sum * GRID == exact[t] + sum(noise[n] for n in r.nodes)
        # its error bar: the sum of its len(nodes) draws (sd by summing the pmf)
        assert r.noise_sd == pytest.approx(release_noise_sd(m.scale, 1 / GRID, len(r.nodes)),
                                           rel=1e-12)
    widths = {len(r.nodes or ()): r.ci95_half_width for r in published}
    assert len({(len(r.nodes or ()), r.ci95_half_width) for r in published}) == len(widths)
    by_draws = [widths[n] for n in sorted(widths)]  # one width per draw count, rising with it
    assert len(by_draws) > 1 and all(a < b for a, b in zip(by_draws, by_draws[1:], strict=False))
    # the base alone: one draw, Pr[|L| > x] = e^-x, plus one grid step
    assert widths[1] == pytest.approx(m.scale * math.log(20) + 1 / GRID, rel=1e-8)
    journal = await read_journal(s, s.topic_releases, Release)
    assert [r.tick for r in journal] == [first + t for t in range(ticks)] + [last + 1]

    # every scale the product published passes the exact audit of its node: the base is the
    # user's own pair (value 2 or absent, spread 2), an increment node moves by node_move
    theta = published[0].theta
    assert audit(Distribution.point(2.0), point_zero(), theta).loss <= 2.0 / theta + 1e-12
    move = coupled_range(PairKind.VALUE_PRESENCE, 2.0, [0.0, 1.0, 2.0]).node_move
    assert audit(Distribution.point(move), point_zero(), theta).loss == pytest.approx(move / theta)
    assert m.sensitivity / theta <= BUDGET


def test_a_window_tree_on_the_broker_charged_once_and_continued_by_a_new_owner(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_tree(broker, tmp_path))


async def _waits_then_freezes(broker: EmbeddedBroker, data_dir: Path) -> None:
    s = await tree_settings(broker, data_dir, partitions=2)
    window, first = first_tick_of_a_later_window()
    parts = {0: part(window, 40)[0],
             1: Partial(partition=1, sum_units=8, window=window - 1, admitted_units=8)}
    published: list[Release] = []
    async with running(s, parts) as r:
        assert await r.on_clock(first) is None  # partition 1 is behind the window: it waits
        assert r.next_tick() <= first  # not settled: tried again, never skipped
        parts[1] = Partial(partition=1, sum_units=12, window=window, admitted_units=12)
        for tick in (first, first + 1):
            record = await r.on_clock(tick)
            assert record is not None and record.tick == tick
            published.append(record)
        # partition 0 two windows ahead: window's sum unknown, the window freezes at 40 + 12
        parts[0] = Partial(partition=0, sum_units=99, window=window + 2, admitted_units=99,
                           previous_units=77)
        record = await r.on_clock(first + 2)
        assert record is not None
        published.append(record)
    parts[0] = Partial(partition=0, sum_units=120, window=window + 2, admitted_units=120,
                       previous_units=88)  # a new owner finds 52 from the journals
    async with running(s, parts) as r:
        record = await r.on_clock(first + 3)
        assert record is not None and record.tick == first + 3
        published.append(record)
    nodes = await read_journal(s, s.topic_tree_nodes, NodeRecord)
    noise = {n.node: n.units for n in nodes if n.window == window}
    exact = [round(r.noisy_sum * GRID) - sum(noise[n] for n in r.nodes or []) for r in published]
    assert exact == [52, 52, 52, 52]


def test_a_tick_waits_for_a_partition_behind_and_a_window_that_cannot_be_read_freezes(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_waits_then_freezes(broker, tmp_path))


async def _failed_send_restart(broker: EmbeddedBroker, data_dir: Path) -> None:
    s = await tree_settings(broker, data_dir)
    window, first = first_tick_of_a_later_window()
    parts = part(window, 40)
    async with running(s, parts) as r:
        async def lost(topic: str, payload: bytes) -> bool:
            if topic == s.topic_releases:
                return False  # the broker never acknowledged the release: nothing published
            return await real(topic, payload)  # (the node journal's appends land)

        real = r.publisher.send
        r.publisher.send = lost  # type: ignore[method-assign]
        assert await r.on_clock(first) is None
        r.publisher.send = real  # type: ignore[method-assign]
    async with running(s, parts) as r:  # a restart on the same host (the same local file)
        record = await r.on_clock(first + 1)
    assert record is not None and record.window == window
    # the window's charge is on this host's books already: not charged again
    assert record.charge == 0.0 and record.epsilon_spent == BUDGET


def test_a_restart_after_a_failed_send_does_not_charge_the_window_twice(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_failed_send_restart(broker, tmp_path))


async def _refused_first_release(broker: EmbeddedBroker, data_dir: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    s = await tree_settings(broker, data_dir)
    window, first = first_tick_of_a_later_window()
    monkeypatch.setattr(TreeMechanism, "draw_units", lambda self: 1)  # known noise: 1 unit
    parts = part(window, 2**53)  # + 1 unit of noise: beyond what a float holds exactly
    async with running(s, parts) as r:
        assert await r.on_clock(first) is None  # refused: drawn and charged, not published
        assert r.ledger.accountant.spent == BUDGET
        parts.update(part(window, 40))
        record = await r.on_clock(first + 1)
    assert record is not None and record.window == window
    # the refused release paid the window: not charged again (issue 42, point 7)
    assert record.charge == 0.0 and record.epsilon_spent == BUDGET


def test_a_refused_first_release_keeps_the_window_s_charge(
        broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(_refused_first_release(broker, tmp_path, monkeypatch))


async def _round_inside_a_window(broker: EmbeddedBroker, data_dir: Path) -> None:
    s = await tree_settings(broker, data_dir)
    window, first = first_tick_of_a_later_window()
    parts = part(window, 40)
    law = dict(support=[0.0, 1.0, 2.0], probs=[0.2, 0.3, 0.5], epsilon_learn=0.1,
               epsilon_spent=0.1, window=window)
    async with running(s, parts) as r:
        assert r.tree is not None
        assert await r.on_clock(first - 1) is not None  # the journals read: the round noted
        (group,) = r.laws
        r.tree.note_round([PriorsRecord(seq=1, ts=0.0, group=group, tick=first - 3, **law)])
        opening = await r.on_clock(first)
        r.tree.note_round([PriorsRecord(seq=2, ts=0.0, group=group, tick=first + 1, **law)])
        r.priors_seq = 2  # the round in force now: it calibrates the next window
        later = await r.on_clock(first + 2)
    assert opening is not None and later is not None
    # both name the round whose laws calibrated the window's theta (issue 42, point 7)
    assert opening.priors_seq == later.priors_seq == 1 and later.theta == opening.theta


def test_tree_releases_name_the_round_that_calibrated_their_window(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    asyncio.run(_round_inside_a_window(broker, tmp_path))
