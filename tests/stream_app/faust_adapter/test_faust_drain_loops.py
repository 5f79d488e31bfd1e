"""The worker's drain loop (stream_app/faust_adapter/consumer.py) against Faust's own
``Consumer._drain_messages`` on the same scripted logs (tests/stream_app/scripted_log.py).

Each scenario runs both loops; where Faust's loop gets it wrong, its case is an ``xfail`` with
strict=True naming the defect, so the evidence is checked on every run (an XPASS fails the suite:
Faust fixed it, or the scenario no longer shows it). On logs with offset gaps (compaction,
transaction markers) our loop must cost about the fetches Faust's does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faust.types import TP

from stream_app.faust_adapter.alignment import Alignment
from stream_app.faust_adapter.app import new_app
from stream_app.faust_adapter.client_view import ClientView
from stream_app.faust_adapter.offsets import ExpectedOffsets
from stream_app.metrics import CONSUMER_SEEKS
from stream_app.settings import Settings
from tests.stream_app.scripted_log import (
    TP0,
    ScriptedLog,
    compacted_offsets,
    transactional_offsets,
)

OVERWRITES_SEEK = "Faust's loop sets the read offset after the hand-off, over a seek made during it"
LOSES_ABANDONED = ("Faust's loop advances past an abandoned hand-off: the record is never "
                   "fetched again")
GOES_ON_AFTER_SEEK = ("Faust's loop goes on with the rest of a batch fetched before a seek made "
                      "during a hand-off")
SEEK_IN_THREAD = ("Faust's loop drops the records a seek in the client thread fetched again, "
                  "as read already (its read offset is set over the seek's)")
STALE_BATCH = ("Faust's loop hands over a batch fetched before a seek past the seek target and "
               "acknowledges the offsets in between as a gap")


TPM = TP("membership", 0)  # the gate's partner of TP0
# the partner caught up as of any fetch: nothing of it to wait for (client_view.ClientView)
PARTNER_CAUGHT_UP = ClientView(position=0, end=0, poll_ms=2**62)


def loops(stock_defect: str | None = None) -> Any:
    stock: Any = "stock"
    if stock_defect is not None:
        stock = pytest.param("stock", marks=pytest.mark.xfail(strict=True, reason=stock_defect))
    return pytest.mark.parametrize("loop", ["ours", stock])


@pytest.fixture
async def consumer() -> Any:
    app = new_app(Settings(), "drain-loops-test", broker="kafka://127.0.0.1:1",
                  store="memory://", web_enabled=False)
    return app.consumer


def gap_offsets(consumer: Any) -> set[int]:
    return {o for iv in consumer._gap[TP0] for o in range(iv.begin, iv.end)}


@loops()
async def test_records_are_handed_over_once_in_order(consumer: Any, loop: str) -> None:
    log = ScriptedLog(consumer, list(range(10)), max_records=4)
    await log.drain(loop)
    assert log.delivered == list(range(10)) and log.seeks == []


@loops()
async def test_gaps_inside_and_between_batches_cost_no_seek(consumer: Any, loop: str) -> None:
    offsets = [0, 1, 2, 5, 6, 9, 10, 14]
    log = ScriptedLog(consumer, offsets, max_records=3)
    await log.drain(loop)
    assert log.delivered == offsets and log.seeks == []
    assert log.fetches == 4  # three batches, then the empty fetch at the log end
    if loop == "ours":  # acknowledged, so commits pass the holes
        assert gap_offsets(consumer) == {3, 4, 7, 8, 11, 12, 13}


@loops(stock_defect=GOES_ON_AFTER_SEEK)
async def test_a_gap_right_after_a_seek_is_fetched_once_more_then_handed_over_past(
        consumer: Any, loop: str) -> None:
    """The first record after a seek is past the seek's target: ours fetches from the target
    once more (a seek the client lost looks the same; run L, tests/README.md), and the same
    first record again is a gap (here a transaction marker): one confirming seek, no loss."""
    log = ScriptedLog(consumer, [0, 1, 2, 3, 5, 6], max_records=4)

    async def rebalance(offset: int) -> None:
        if offset == 1 and not log.seeks:
            await consumer.seek(TP0, 4)  # 4 is a transaction marker

    log.on_record = rebalance
    await log.drain(loop)
    assert log.delivered == [0, 1, 5, 6]
    assert log.seeks == ([4, 4] if loop == "ours" else [4])


@loops(stock_defect=OVERWRITES_SEEK)
async def test_a_seek_during_a_hand_off_is_not_overwritten(consumer: Any, loop: str) -> None:
    # a rebalance seeks back to the committed offset 2 while 4 is being handed over: every record
    # from 2 on is handed over again after it (stream buffers were emptied with the rebalance)
    log = ScriptedLog(consumer, list(range(8)), max_records=5)

    async def rebalance(offset: int) -> None:
        if offset == 4 and not log.seeks:
            await consumer.seek(TP0, 2)

    log.on_record = rebalance
    await log.drain(loop)
    assert log.delivered == [0, 1, 2, 3, 4, 2, 3, 4, 5, 6, 7] and log.seeks == [2]


@loops(stock_defect=STALE_BATCH)
async def test_a_batch_fetched_before_a_seek_is_not_handed_over_past_it(
    consumer: Any, loop: str
) -> None:
    # the second fetch returns 5..7 (4 is a marker) while a rebalance seeks back to 1
    log = ScriptedLog(consumer, [0, 1, 2, 3, 5, 6, 7], max_records=4)

    async def rebalance() -> None:
        await consumer.seek(TP0, 1)

    async def first_batch_done(offset: int) -> None:
        if offset == 3 and not log.seeks:
            log.during_fetch = rebalance

    log.on_record = first_batch_done
    await log.drain(loop)
    assert log.delivered == [0, 1, 2, 3, 1, 2, 3, 5, 6, 7]
    assert log.seeks == [1, 1]  # the rebalance's, then one back from the stale batch
    assert gap_offsets(consumer) == {4}  # the marker; 2 and 3 were handed over again


@loops(stock_defect=LOSES_ABANDONED)
async def test_an_abandoned_hand_off_is_fetched_again(consumer: Any, loop: str) -> None:
    log = ScriptedLog(consumer, list(range(6)), max_records=4)
    log.resume_flow_before_fetch = True  # the rebalance is over before the next fetch
    seeks_before = CONSUMER_SEEKS.value

    async def full_buffer(offset: int) -> None:
        if offset == 2 and not log.seeks:
            consumer.suspend_flow.set()  # a rebalance suspends the flow meanwhile
            await asyncio.Event().wait()

    log.on_record = full_buffer
    await log.drain(loop)
    assert log.delivered == list(range(6))
    assert log.seeks == [2] and CONSUMER_SEEKS.value - seeks_before == 1


@loops(stock_defect=OVERWRITES_SEEK)
async def test_an_abandoned_hand_off_leaves_a_seek_made_meanwhile_alone(
    consumer: Any, loop: str
) -> None:
    """A rebalance seeks to the committed offset 1 and suspends the flow while 3 is being
    handed over: seeking back to 3 (or reading on from there) would skip 1 and 2."""
    log = ScriptedLog(consumer, list(range(5)), max_records=4)
    log.resume_flow_before_fetch = True

    async def rebalance(offset: int) -> None:
        if offset == 3 and not log.seeks:
            await consumer.seek(TP0, 1)
            consumer.suspend_flow.set()
            await asyncio.Event().wait()

    log.on_record = rebalance
    await log.drain(loop)
    assert log.delivered == [0, 1, 2, 1, 2, 3, 4] and log.seeks == [1]


@loops()
async def test_a_record_wiped_after_its_hand_off_is_handed_over_again(
    consumer: Any, loop: str
) -> None:
    """Faust's flow control empties the stream buffer after the record's hand-off completed;
    the refetch (stream_app/faust_adapter/flow.py) seeks to that very record."""
    log = ScriptedLog(consumer, list(range(4)), max_records=3)

    async def wiped(offset: int) -> None:
        if offset == 2 and not log.seeks:
            consumer.refetch({TP0: 2}, "the stream buffer was emptied")

    log.on_record = wiped
    await log.drain(loop)
    assert log.seeks == [2]
    assert log.delivered == [0, 1, 2, 2, 3]  # the wiped copy, then the fresh one


@loops()
async def test_an_abandoned_hand_off_of_a_revoked_partition_is_left_to_its_next_owner(
    consumer: Any, loop: str
) -> None:
    log = ScriptedLog(consumer, [0, 1], max_records=2)

    async def revoked_meanwhile(offset: int) -> None:
        if offset == 1:
            log.assigned.clear()
            consumer.suspend_flow.set()
            await asyncio.Event().wait()

    log.on_record = revoked_meanwhile
    await log.drain(loop)
    assert log.delivered == [0] and log.seeks == []


@loops(stock_defect=SEEK_IN_THREAD)
async def test_records_back_while_a_seek_runs_in_the_client_thread_are_fetched_after_it(
    consumer: Any, loop: str
) -> None:
    """Table recovery seeks a changelog with ``seek_wait``, which runs in the client's thread
    and is awaited: a batch from the new position can come back before the wait ends. Judged
    against the old expected offset it was dropped, and nothing fetched it again."""
    log = ScriptedLog(consumer, list(range(10)), max_records=4)
    recovery: list[asyncio.Future[Any]] = []

    async def recovery_seeks(offset: int) -> None:
        if offset == 3 and not recovery:
            recovery.append(asyncio.ensure_future(consumer.seek_wait({TP0: 0})))

    log.on_record = recovery_seeks
    await log.drain(loop)
    await recovery[0]
    assert log.delivered == [0, 1, 2, 3, *range(10)]


async def test_records_back_while_a_seek_runs_in_the_client_thread_are_never_kept_by_the_gate(
    consumer: Any
) -> None:
    """The gate (alignment.py) drops what it keeps of a partition when the partition is sought,
    as records fetched before the seek. A seek in the client thread lands at a moment the loop
    cannot see (aiokafka's ``seek_to_committed`` seeks one partition after another between
    round trips): a batch that comes back meanwhile may be from the new position. Kept by the
    gate (its partner not caught up yet, as at a takeover), it was dropped at the seek's end
    with the client's position past it, and the next record acknowledged the rest as a gap
    (issue 44: a survivor never applied up to 417 reports). Such records are skipped and the
    partition fetched again once the seek is done, as when nothing is gated."""
    gate = Alignment("reports", "membership")
    consumer._gate = gate
    consumer._expected = ExpectedOffsets(on_moved=gate.forget)
    log = ScriptedLog(consumer, list(range(10)), max_records=4)
    log.assigned = {TP0, TPM}
    gate.assign(log.assigned)
    gate.caught_up(TPM, PARTNER_CAUGHT_UP)
    takeover: list[asyncio.Future[Any]] = []

    async def seek_in_thread() -> None:
        await consumer.seek_wait({TP0: 0})
        gate.caught_up(TPM, PARTNER_CAUGHT_UP)  # the partner's records handed over meanwhile

    async def rebalance(offset: int) -> None:
        if offset == 3 and not takeover:
            gate.forget(TPM)  # the partner is sought too: its evidence is gone
            takeover.append(asyncio.ensure_future(seek_in_thread()))

    log.on_record = rebalance
    await log.drain("ours")
    await takeover[0]
    assert log.delivered == [0, 1, 2, 3, *range(10)]
    assert gap_offsets(consumer) == set()


# --- logs with gaps: as many fetches as Faust's own loop -------------------------------------

GAP_LOGS = {
    "compacted": lambda: compacted_offsets(total=50_000, survivors=10_000),
    "transactional": lambda: transactional_offsets(transactions=1_000, size=10),
}


@pytest.mark.parametrize("kind", sorted(GAP_LOGS))
async def test_a_log_with_gaps_costs_the_fetches_of_faust_s_loop(kind: str) -> None:
    offsets = GAP_LOGS[kind]()
    cost: dict[str, tuple[int, int]] = {}
    for loop in ("stock", "ours"):
        app = new_app(Settings(), f"gaps-{loop}", broker="kafka://127.0.0.1:1",
                      store="memory://", web_enabled=False)
        # acknowledgements off: Faust acks no changelog record, and without the commits of a
        # running worker the acknowledged gaps pile up (each costs Faust's loop as much)
        log = ScriptedLog(app.consumer, offsets, max_records=500, acks=False)
        await log.drain(loop)
        assert log.delivered == offsets, loop  # each record once, in order
        cost[loop] = (log.fetches, len(log.seeks))
    print(f"\nGAPS {kind} log ({len(offsets)} records): fetches, seeks = {cost}")
    assert cost["ours"][0] <= 2 * cost["stock"][0]
    assert cost["ours"][1] == 0


@loops()
async def test_transaction_markers_are_acknowledged_as_gaps(consumer: Any, loop: str) -> None:
    offsets = transactional_offsets(transactions=50, size=10)
    log = ScriptedLog(consumer, offsets, max_records=64)
    await log.drain(loop)
    assert log.delivered == offsets and log.seeks == []
    markers = set(range(offsets[-1])) - set(offsets)  # the commit markers before the last record
    assert markers <= gap_offsets(consumer)  # commits can pass every one of them
    if loop == "ours":
        assert gap_offsets(consumer) == markers
