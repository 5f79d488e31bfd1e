"""stream_app.release.tree: one window's tree continues across restarts from its journal, each
node drawn once, releases before and after consistent (no broker: the file journal)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from pufferfish_core.tree import TreeMechanism, tree_mechanism
from pufferfish_core.tree_shape import BASE_ID
from pufferfish_core.vocabulary import PairKind
from stream_app.release.tree import NodeDraw, TreeMismatch, WindowTree
from stream_app.release.tree_journal import FileNodeJournal

TICKS = 16


def mechanism(max_changes: int = 2, epsilon: float = 0.01) -> TreeMechanism:
    # a large scale (theta ~ 1,000 units of 1): draws are almost never 0
    return tree_mechanism(TICKS, max_changes, [PairKind.VALUE_PRESENCE], 5.0,
                          [0.0, 1.0, 5.0], epsilon, grid_log2=0, arity=2)


def exact(tick: int) -> int:
    return 1000 + 7 * tick  # any sums: the noise is what is checked


def journal_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def noise_of(lines: list[dict[str, object]], nodes: Sequence[str]) -> int:
    units = {str(d["node"]): int(str(d["units"])) for d in lines}
    return sum(units[n] for n in nodes)


async def test_a_restart_mid_window_continues_the_same_tree(tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    m = mechanism()
    first = WindowTree(m, 7, FileNodeJournal(path))
    before = [await first.release(t, exact(t)) for t in range(9)]
    drawn_before = dict(first.drawn)

    second = WindowTree(m, 7, FileNodeJournal(path))  # a restart, or a new owner
    after = [await second.release(t, exact(t)) for t in range(5, TICKS)]

    lines = journal_lines(path)
    counts = Counter(str(d["node"]) for d in lines)
    assert max(counts.values()) == 1  # no node drawn twice
    assert {k: second.drawn[k] for k in drawn_before} == drawn_before
    assert set(counts) == {n for r in before + after for n in r.nodes}
    for r in before + after:  # every release: exact sum + the journal's noise of its nodes
        assert r.noisy_units == exact(r.tick) + noise_of(lines, r.nodes)
        assert r.nodes == tuple(m.draws(r.tick))
    repeated = {r.tick: r.noisy_units for r in before}
    for r in after:
        if r.tick in repeated:  # ticks 5..8 released by both owners: the same value
            assert r.noisy_units == repeated[r.tick]
    assert len({d["units"] for d in lines}) > 1  # real draws (theta ~ 1,000 grid units)


async def test_other_windows_draw_their_own_nodes(tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    m = mechanism()
    a = await WindowTree(m, 1, FileNodeJournal(path)).release(3, 0)
    b = await WindowTree(m, 2, FileNodeJournal(path)).release(3, 0)
    lines = journal_lines(path)
    assert Counter(int(d["window"]) for d in lines) == {1: len(a.nodes), 2: len(b.nodes)}


async def test_w_zero_draws_the_base_only(tmp_path: Path) -> None:
    tree = WindowTree(mechanism(max_changes=0), 0, FileNodeJournal(tmp_path / "j"))
    draws = [await tree.release(t, exact(t)) for t in range(TICKS)]
    assert {d.nodes for d in draws} == {(BASE_ID,)}
    assert len({d.noisy_units - exact(d.tick) for d in draws}) == 1


class LandsThenFails(FileNodeJournal):
    """The append reaches the file, but the caller hears an error (a timeout after the write)."""

    failures = 1

    async def append(self, draws: Sequence[NodeDraw]) -> None:
        await super().append(draws)
        if self.failures:
            self.failures -= 1
            raise TimeoutError("no acknowledgement")


class FailsBeforeWriting(FileNodeJournal):
    failures = 1

    async def append(self, draws: Sequence[NodeDraw]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        await super().append(draws)


async def test_a_draw_that_landed_despite_an_error_is_the_one_used(tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    tree = WindowTree(mechanism(), 0, LandsThenFails(path))
    with pytest.raises(TimeoutError):
        await tree.release(3, exact(3))
    landed = journal_lines(path)
    r = await tree.release(3, exact(3))  # re-reads the journal: no new draw for these nodes
    assert journal_lines(path) == landed
    assert r.noisy_units == exact(3) + noise_of(landed, r.nodes)


async def test_a_draw_that_never_landed_is_forgotten(tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    tree = WindowTree(mechanism(), 0, FailsBeforeWriting(path))
    with pytest.raises(OSError):
        await tree.release(3, exact(3))
    r = await tree.release(3, exact(3))
    lines = journal_lines(path)
    assert sorted(str(d["node"]) for d in lines) == sorted(r.nodes)
    assert r.noisy_units == exact(3) + noise_of(lines, r.nodes)


async def test_a_torn_last_line_is_skipped_and_does_not_swallow_the_next(tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    tree = WindowTree(mechanism(), 0, FileNodeJournal(path))
    await tree.release(1, 0)
    with path.open("a") as f:
        f.write('{"window": 0, "node": "0.2", "uni')  # a crash mid-append
    again = WindowTree(mechanism(), 0, FileNodeJournal(path))
    r = await again.release(2, 0)
    assert set(again.drawn) == {BASE_ID, "0.0", "1.0"} and r.nodes == (BASE_ID, "1.0")


async def test_a_journal_of_another_tree_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    await WindowTree(mechanism(epsilon=0.01), 0, FileNodeJournal(path)).release(1, 0)
    other = WindowTree(mechanism(epsilon=0.02), 0, FileNodeJournal(path))
    with pytest.raises(TreeMismatch, match="fixed when it opens"):
        await other.release(2, 0)


async def test_a_frozen_window_repeats_its_last_exact_sum(tmp_path: Path) -> None:
    """A release that cannot read the window's sum (None) freezes the window: it and every
    later release of it show the last release's exact sum, whatever is passed later, so no
    user's contribution moves; a new owner finds that sum from the journal and the last
    published release (its noisy sum and nodes)."""
    path = tmp_path / "nodes.jsonl"
    m = mechanism()
    tree = WindowTree(m, 3, FileNodeJournal(path))
    first = [await tree.release(t, exact(t)) for t in range(4)]
    frozen = [await tree.release(4, None, snapshot=1), await tree.release(5, exact(5))]
    lines = journal_lines(path)
    for r in frozen:
        assert r.noisy_units - noise_of(lines, r.nodes) == exact(3)
    last = frozen[-1]
    owner = WindowTree(m, 3, FileNodeJournal(path), (last.noisy_units, last.nodes))
    later = await owner.release(6, None, snapshot=1)
    assert later.noisy_units - noise_of(journal_lines(path), later.nodes) == exact(3)
    assert first[0].noisy_units - noise_of(lines, first[0].nodes) == exact(0)


async def test_a_window_frozen_before_its_first_release_takes_the_snapshot(
        tmp_path: Path) -> None:
    tree = WindowTree(mechanism(), 0, FileNodeJournal(tmp_path / "j"))
    a = await tree.release(2, None, snapshot=555)
    b = await tree.release(3, exact(3))
    lines = journal_lines(tmp_path / "j")
    assert [r.noisy_units - noise_of(lines, r.nodes) for r in (a, b)] == [555, 555]
    with pytest.raises(ValueError):
        await WindowTree(mechanism(), 1, FileNodeJournal(tmp_path / "k")).release(0, None)


class InFlightAndShortReads(FileNodeJournal):
    """A broker that misbehaves in both ways of issue 42, point 6: the first append fails
    while its records are still in flight (they land at the next append, after the read that
    should have found them), and every read after the first misses the last appended batch (a
    ListOffsets short of the log end, as tansu's)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.in_flight: list[NodeDraw] = []
        self.failed_once = False
        self.batches: list[int] = []  # lines per append, to cut the short reads

    async def append(self, draws: Sequence[NodeDraw]) -> None:
        if not self.failed_once:
            self.failed_once, self.in_flight = True, list(draws)
            raise TimeoutError("not acknowledged")
        if self.in_flight:  # the late landing, before this append's records
            await super().append(self.in_flight)
            self.batches.append(len(self.in_flight))
            self.in_flight = []
        await super().append(draws)
        self.batches.append(len(draws))

    async def read(self, window: int) -> Sequence[NodeDraw]:
        got = list(await super().read(window))
        return got[: len(got) - self.batches[-1]] if self.batches else got


async def test_no_node_is_published_with_two_values_after_a_late_append_and_short_reads(
        tmp_path: Path) -> None:
    path = tmp_path / "nodes.jsonl"
    journal = InFlightAndShortReads(path)
    tree = WindowTree(mechanism(), 0, journal)
    with pytest.raises(TimeoutError):
        await tree.release(3, exact(3))
    published: dict[str, set[int]] = {}
    for t in range(3, TICKS):
        if t % 4 == 0:
            tree.synced = False  # a re-read of the journal (a fence, a retry)
        r = await tree.release(t, exact(t))
        lines = journal_lines(path)
        # what this release's noise is made of: the journal's records of its nodes
        values = {n: {int(str(d["units"])) for d in lines if d["node"] == n} for n in r.nodes}
        assert all(len(v) == 1 for v in values.values()), values  # one value per node
        assert r.noisy_units == exact(t) + sum(v.pop() for v in values.values())
        for n in r.nodes:
            published.setdefault(n, set()).add(tree.drawn[n])
    assert all(len(v) == 1 for v in published.values())
    # a new owner reading the whole journal publishes the same values
    again = WindowTree(mechanism(), 0, FileNodeJournal(path))
    r = await again.release(TICKS - 1, exact(TICKS - 1))
    assert all(again.drawn[n] in published[n] for n in r.nodes)
