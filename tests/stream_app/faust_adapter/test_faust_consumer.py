"""The worker's consumer (stream_app/faust_adapter/consumer.py, faust_handoff.py): the hand-off runs
the callback inline when it need not wait, and a callback that waits is still abandoned when the
flow is suspended (Faust's rebalance safety); the stall watch; records Faust's getmany throws
away are fetched again; consumer_fetch_max_wait_seconds reaches aiokafka's fetcher. The drain
loop's scenarios, against Faust's own loop too: test_faust_drain_loops.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

import stream_app.faust_adapter.consumer as faust_consumer
from stream_app.faust_adapter.app import new_app
from stream_app.faust_adapter.consumer import PufferfishConsumer
from stream_app.faust_adapter.handoff import Resumed
from stream_app.settings import Settings
from tests.stream_app.scripted_log import TP0, Record, ScriptedLog


async def test_resumed_continues_a_started_coroutine() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def job() -> int:
        got = await gate
        await asyncio.sleep(0)
        return got + 1

    coro = job()
    first = coro.send(None)
    assert first is gate
    task = asyncio.ensure_future(Resumed(coro, first))
    await asyncio.sleep(0)
    assert not task.done()
    gate.set_result(41)
    assert await task == 42


async def test_resumed_passes_cancellation_into_the_coroutine() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    seen: list[str] = []

    async def job() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    coro = job()
    task = asyncio.ensure_future(Resumed(coro, coro.send(None)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"] and gate.cancelled()


def _app(**settings: Any) -> Any:
    return new_app(Settings(**settings), "consumer-test", broker="kafka://127.0.0.1:1",
                   store="memory://", web_enabled=False)


@pytest.fixture
async def consumer() -> Any:
    cons = _app().consumer
    assert isinstance(cons, PufferfishConsumer)
    return cons


async def test_a_callback_that_need_not_wait_runs_inline(consumer: Any) -> None:
    caller = asyncio.current_task()
    ran_in: list[Any] = []

    async def callback() -> str:
        ran_in.append(asyncio.current_task())
        return "done"

    result = await consumer._hand_over(callback())
    assert ran_in == [caller]  # no task was made for it
    assert result is True


async def test_a_waiting_callback_completes_in_wait_first(consumer: Any) -> None:
    gate = asyncio.Event()

    async def callback() -> str:
        await gate.wait()
        return "late"

    waiting = asyncio.ensure_future(
        consumer._hand_over(callback()))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    gate.set()
    result = await asyncio.wait_for(waiting, 5)
    assert result is True


async def test_a_waiting_callback_is_abandoned_when_the_flow_is_suspended(consumer: Any) -> None:
    seen: list[str] = []

    async def callback() -> None:
        try:
            await asyncio.Event().wait()  # e.g. a full stream buffer
        except asyncio.CancelledError:
            seen.append("abandoned")
            raise

    consumer.suspend_flow.clear()
    waiting = asyncio.ensure_future(
        consumer._hand_over(callback()))
    await asyncio.sleep(0.01)
    consumer.suspend_flow.set()  # a rebalance starts
    result = await asyncio.wait_for(waiting, 5)
    await asyncio.sleep(0)
    assert seen == ["abandoned"]
    assert result is False  # only suspend_flow.wait() won: the record was not handed over


async def test_a_callback_error_propagates(consumer: Any) -> None:
    async def callback() -> None:
        raise ValueError("bad record")

    with pytest.raises(ValueError, match="bad record"):
        await consumer._hand_over(callback())


@pytest.mark.parametrize(("seconds", "expected_ms"), [(None, 1500), (0.1, 100), (2.0, 2000)])
async def test_fetch_max_wait_reaches_the_fetcher_settings(
    seconds: float | None, expected_ms: int
) -> None:
    settings = {} if seconds is None else {"consumer_fetch_max_wait_seconds": seconds}
    cons = _app(**settings).consumer
    raw = cons._thread._create_worker_consumer(cons.transport)
    assert raw._fetch_max_wait_ms == expected_ms
    await raw.stop()


@pytest.fixture
async def drained() -> Any:
    return _app().consumer


async def test_stopping_the_drain_cancels_a_hand_off_in_progress(drained: Any) -> None:
    seen: list[str] = []

    async def callback() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    waiting = asyncio.ensure_future(drained._hand_over(callback()))
    await asyncio.sleep(0.01)
    waiting.cancel()  # the fetcher stops
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0)
    assert seen == ["cancelled"]


async def test_a_suspended_flow_abandons_without_starting_until_it_resumes(drained: Any) -> None:
    ran: list[int] = []

    async def callback(n: int) -> None:
        ran.append(n)

    drained.suspend_flow.set()
    await asyncio.sleep(0)
    assert await drained._hand_over(callback(1)) is False
    drained.suspend_flow.clear()
    assert await drained._hand_over(callback(2)) is True
    assert ran == [2]


# --- the stall watch ---------------------------------------------------------------------

CHECK = 0.01  # STALL_CHECK_SECONDS in these tests


def _watch(consumer: Any, monkeypatch: pytest.MonkeyPatch) -> asyncio.Future[Any]:
    monkeypatch.setattr(faust_consumer, "STALL_CHECK_SECONDS", CHECK)
    return asyncio.ensure_future(consumer._watch_for_lost_records(consumer))


async def test_records_the_client_consumed_but_never_handed_over_are_fetched_again(
    drained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = ScriptedLog(drained, [0, 1, 2])
    drained._expected.sought(TP0, 1)
    log.position = 2  # the client consumed offset 1; the loop never saw it
    watch = _watch(drained, monkeypatch)
    try:
        await asyncio.wait_for(_until(lambda: log.seeks), 5)
    finally:
        watch.cancel()
    assert log.seeks[0] == 1


async def test_a_client_that_is_caught_up_is_left_alone(
    drained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = ScriptedLog(drained, [0, 1, 2])
    drained._expected.sought(TP0, 2)
    log.position = 2
    watch = _watch(drained, monkeypatch)
    await asyncio.sleep(20 * CHECK)
    watch.cancel()
    assert log.seeks == []


async def test_a_stall_check_during_a_slow_hand_off_hands_nothing_over_twice(
    drained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hand-off of 1 waits (a full stream buffer) for many stall checks while the client is
    past it. Seeking back then fetched 1 again and, its first hand-off completing, handed it
    over a second time."""
    log = ScriptedLog(drained, list(range(4)), max_records=4)
    checks_seen = asyncio.Event()

    async def slow(offset: int) -> None:
        if offset == 1 and not checks_seen.is_set():
            await asyncio.sleep(30 * CHECK)  # about 15 stall checks
            checks_seen.set()

    log.on_record = slow
    watch = _watch(drained, monkeypatch)
    try:
        await log.drain("ours")
    finally:
        watch.cancel()
    assert log.delivered == [0, 1, 2, 3] and log.seeks == []


async def test_a_gap_at_the_end_of_the_log_is_sought_back_once(
    drained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction marker after the last record leaves the client one past the expected
    offset while nothing is left to hand over: one seek back shows nothing is there."""
    log = ScriptedLog(drained, [0, 1, 2], log_end=4)
    await log.drain("ours")
    assert log.position == 4 and drained._expected.expected(TP0) == 3

    async def fetched_again(tp: Any) -> int:
        return 4  # a fetch after the seek back passes the marker again

    drained._thread.position = fetched_again
    watch = _watch(drained, monkeypatch)
    await asyncio.sleep(30 * CHECK)
    watch.cancel()
    assert log.seeks == [3]


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.01)


# --- the fetch: records Faust's getmany throws away are fetched again -----------------------

CL0 = TP("app-users-changelog", 0)


class _Fetch:
    """One scripted fetch through the consumer's getmany, with a seek that only records."""

    def __init__(self, consumer: Any, records: dict[TP, list[int]],
                 active: set[TP] | None = None) -> None:
        self.consumer = consumer
        self.seeks: list[tuple[TP, int]] = []
        batch = {tp: [Record(o, topic=tp.topic) for o in offs] for tp, offs in records.items()}
        active = set(records) if active is None else active

        async def wait_next_records(timeout: float) -> Any:
            return batch, active

        async def seek_to_committed() -> dict[TP, int]:
            return {}  # nothing committed: Faust's seek back moves no partition

        consumer._wait_next_records = wait_next_records
        consumer._to_message = lambda tp, record: record
        consumer.assignment = lambda: {TP0, CL0}
        consumer._thread = SimpleNamespace(seek=lambda tp, o: self.seeks.append((tp, o)),
                                           seek_to_committed=seek_to_committed,
                                           highwater=lambda tp: 10)

    async def run(self, on_record: Any = None) -> list[tuple[TP, int]]:
        got: list[tuple[TP, int]] = []
        async for tp, message in self.consumer.getmany(timeout=1.0):
            got.append((tp, message.offset))
            if on_record is not None:
                on_record(tp, message.offset)
        return got


async def test_a_batch_back_while_the_flow_is_stopped_is_fetched_again(drained: Any) -> None:
    """Table recovery seeks its changelog to 0; a fetch begun before comes back with 0..8 while
    the flow is still stopped and Faust throws it away. Without a committed offset nothing
    brought the records back: recovery waited for ever (a worker rejoining after a broker
    restart, its changelog positions at the highwater)."""
    drained._expected.sought(CL0, 0)
    drained.flow_active = False
    fetch = _Fetch(drained, {CL0: list(range(9))})
    assert await fetch.run() == []
    assert fetch.seeks == [(CL0, 0)]
    assert drained._expected.expected(CL0) == 0


async def test_the_rest_of_a_batch_is_fetched_again_after_a_new_generation(drained: Any) -> None:
    drained._expected.sought(TP0, 0)
    fetch = _Fetch(drained, {TP0: [0, 1, 2, 3]})

    def handed_then_rebalanced(tp: TP, offset: int) -> None:
        drained._expected.handed_over(tp, offset, drained._expected.epoch(tp))
        if offset == 1:
            drained.app.consumer_generation_id += 1  # a rebalance began; no seek yet

    assert await fetch.run(handed_then_rebalanced) == [(TP0, 0), (TP0, 1)]
    assert fetch.seeks == [(TP0, 2)]


async def test_records_of_a_partition_paused_meanwhile_are_fetched_again(drained: Any) -> None:
    fetch = _Fetch(drained, {TP0: [0], CL0: [4, 5]}, active={TP0})
    assert await fetch.run() == [(TP0, 0)]
    assert fetch.seeks == [(CL0, 4)]  # position unknown here: from the first one dropped


async def test_a_seek_made_after_the_fetch_decides_over_what_getmany_drops(drained: Any) -> None:
    drained._expected.sought(TP0, 0)
    fetch = _Fetch(drained, {TP0: [0, 1, 2]})

    def sought_then_rebalanced(tp: TP, offset: int) -> None:
        drained._expected.sought(TP0, 0)  # e.g. Faust's seek to the committed offset
        drained.app.consumer_generation_id += 1

    assert await fetch.run(sought_then_rebalanced) == [(TP0, 0)]
    assert fetch.seeks == []
