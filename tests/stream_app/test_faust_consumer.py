"""The worker's consumer (stream_app/faust_consumer.py). Its drain loop hands records over in
offset order and fetches again what a rebalance abandoned; drain_eager: the callback runs inline
when it need not wait, and a callback that waits is still abandoned when the flow is suspended
(Faust's rebalance safety). consumer_fetch_max_wait_seconds reaches aiokafka's fetcher."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from stream_app.faust_app import new_app
from stream_app.faust_consumer import PufferfishConsumer, _Resumed
from stream_app.settings import Settings


async def test_resumed_continues_a_started_coroutine() -> None:
    gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def job() -> int:
        got = await gate
        await asyncio.sleep(0)
        return got + 1

    coro = job()
    first = coro.send(None)
    assert first is gate
    task = asyncio.ensure_future(_Resumed(coro, first))
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
    task = asyncio.ensure_future(_Resumed(coro, coro.send(None)))
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
    cons = _app(drain_eager=True).consumer
    assert isinstance(cons, PufferfishConsumer)
    return cons


async def test_a_callback_that_need_not_wait_runs_inline(consumer: Any) -> None:
    caller = asyncio.current_task()
    ran_in: list[Any] = []

    async def callback() -> str:
        ran_in.append(asyncio.current_task())
        return "done"

    result = await consumer._hand_over(callback(), True)
    assert ran_in == [caller]  # no task was made for it
    assert result is True


async def test_a_waiting_callback_completes_in_wait_first(consumer: Any) -> None:
    gate = asyncio.Event()

    async def callback() -> str:
        await gate.wait()
        return "late"

    waiting = asyncio.ensure_future(
        consumer._hand_over(callback(), True))
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
        consumer._hand_over(callback(), True))
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
        await consumer._hand_over(callback(), True)


async def test_off_by_default_the_callback_runs_in_a_task_as_in_faust() -> None:
    cons = _app().consumer
    caller = asyncio.current_task()
    ran_in: list[Any] = []

    async def callback() -> None:
        ran_in.append(asyncio.current_task())

    await cons._hand_over(callback(), False)
    assert ran_in and ran_in[0] is not caller  # Faust ran it in a task of its own


@pytest.mark.parametrize(("seconds", "expected_ms"), [(None, 1500), (0.1, 100), (2.0, 2000)])
async def test_fetch_max_wait_reaches_the_fetcher_settings(
    seconds: float | None, expected_ms: int
) -> None:
    settings = {} if seconds is None else {"consumer_fetch_max_wait_seconds": seconds}
    cons = _app(**settings).consumer
    raw = cons._thread._create_worker_consumer(cons.transport)
    assert raw._fetch_max_wait_ms == expected_ms
    await raw.stop()


# --- the drain loop: records in offset order, nothing abandoned is lost ----------------------

TP0 = TP("reports", 0)


@dataclass
class _Record:
    offset: int
    topic: str = "reports"
    key: bytes = b"u"
    value: bytes = b"{}"


class _Drain:
    """Runs the consumer's drain loop over scripted fetches, with a seek that only records."""

    def __init__(self, consumer: Any, batches: list[list[int]]) -> None:
        self.consumer, self.batches = consumer, list(batches)
        self.delivered: list[int] = []
        self.seeks: list[tuple[TP, int]] = []
        self.assigned = {TP0}
        self.fetcher = SimpleNamespace(_stopped=asyncio.Event())
        self.on_record: Any = None
        consumer.callback = self._callback
        consumer.getmany = self._getmany
        consumer.assignment = lambda: set(self.assigned)
        consumer._thread = SimpleNamespace(seek=self._seek)
        consumer.app.topics.acks_enabled_for = lambda topic: True

    async def _callback(self, message: _Record) -> None:
        if self.on_record is not None:
            await self.on_record(message.offset)
        self.delivered.append(message.offset)

    async def _getmany(self, timeout: float) -> Any:
        if not self.batches:
            self.fetcher._stopped.set()
            return
        for offset in self.batches.pop(0):
            yield TP0, _Record(offset)

    def _seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))

    def resume_flow_before_each_fetch(self) -> None:
        """A flow suspended by a rebalance runs again before the next fetch."""
        original = self._getmany

        async def resume_then_fetch(timeout: float) -> Any:
            self.consumer.suspend_flow.clear()
            async for item in original(timeout):
                yield item

        self.consumer.getmany = resume_then_fetch

    async def run(self) -> None:
        await asyncio.wait_for(self.consumer._drain_messages(self.fetcher), 10)


@pytest.fixture(params=[False, True], ids=["faust-step", "eager"])
async def drained(request: pytest.FixtureRequest) -> Any:
    return _app(drain_eager=request.param).consumer


async def test_records_are_handed_over_once_in_order(drained: Any) -> None:
    drain = _Drain(drained, [[0, 1, 2], [1, 2, 3], [4]])
    await drain.run()
    assert drain.delivered == [0, 1, 2, 3, 4] and drain.seeks == []


async def test_a_batch_fetched_before_a_seek_is_not_handed_over_past_it(drained: Any) -> None:
    # a rebalance seeks back to the committed offset 2 while offset 4 is being handed over;
    # Faust's loop would go on with 5 and 6, acknowledge 3..4 as a gap and drop the re-fetch
    drain = _Drain(drained, [[0, 1, 2, 3], [4, 5, 6], [2, 3, 4, 5, 6]])

    async def rebalance(offset: int) -> None:
        if offset == 4 and not drain.seeks:
            await drained.seek(TP0, 2)

    drain.on_record = rebalance
    await drain.run()
    assert drain.delivered == [0, 1, 2, 3, 4, 2, 3, 4, 5, 6]
    assert drain.seeks == [(TP0, 2)] and not drained._gap[TP0]


async def test_an_abandoned_hand_off_is_fetched_again(drained: Any) -> None:
    stuck = asyncio.Event()
    drain = _Drain(drained, [[0, 1], [2, 3], [2, 3]])

    async def full_buffer(offset: int) -> None:
        if offset == 2 and not drain.seeks:
            drained.suspend_flow.set()  # a rebalance suspends the flow meanwhile
            await stuck.wait()

    drain.on_record = full_buffer
    drain.resume_flow_before_each_fetch()
    await drain.run()
    assert drain.seeks == [(TP0, 2)]  # 3 was skipped with it, not handed over ahead of it
    assert drain.delivered == [0, 1, 2, 3]


async def test_a_record_wiped_after_its_hand_off_is_handed_over_again(drained: Any) -> None:
    """Faust's flow control empties the stream buffer after the record's hand-off completed
    but before the loop went on; the refetch seeks to that very record (the proof run's stuck
    restart: advancing past it dropped the fresh copy and nothing noticed)."""
    drain = _Drain(drained, [[0, 1, 2], [2, 3]])

    async def wiped(offset: int) -> None:
        if offset == 2 and not drain.seeks:
            drained.refetch({TP0: 2}, "the stream buffer was emptied")

    drain.on_record = wiped
    await drain.run()
    assert drain.seeks == [(TP0, 2)]
    assert drain.delivered == [0, 1, 2, 2, 3]  # the wiped copy, then the fresh one


async def test_an_abandoned_hand_off_leaves_a_seek_made_meanwhile_alone(drained: Any) -> None:
    """A rebalance seeks to the committed offset 1 and suspends the flow while 3 is being
    handed over: seeking back to 3 would skip 1 and 2."""
    drain = _Drain(drained, [[0, 1, 2, 3], [1, 2, 3]])

    async def rebalance(offset: int) -> None:
        if offset == 3 and not drain.seeks:
            await drained.seek(TP0, 1)
            drained.suspend_flow.set()
            await asyncio.Event().wait()

    drain.on_record = rebalance
    drain.resume_flow_before_each_fetch()
    await drain.run()
    assert drain.delivered == [0, 1, 2, 1, 2, 3]


async def test_an_abandoned_hand_off_of_a_revoked_partition_is_left_to_its_next_owner(
    drained: Any,
) -> None:
    drain = _Drain(drained, [[0, 1]])

    async def revoked_meanwhile(offset: int) -> None:
        if offset == 1:
            drain.assigned.clear()
            drained.suspend_flow.set()
            await asyncio.Event().wait()

    drain.on_record = revoked_meanwhile
    await drain.run()
    assert drain.delivered == [0] and drain.seeks == []


async def test_a_real_hole_is_checked_once_then_acknowledged(drained: Any) -> None:
    drain = _Drain(drained, [[0, 1, 2], [5, 6], [5, 6], [7]])
    await drain.run()
    assert drain.delivered == [0, 1, 2, 5, 6, 7]
    assert drain.seeks == [(TP0, 3)]  # once: the fetch from 3 started at 5 again
    gap = drained._gap[TP0]
    assert {o for iv in gap for o in range(iv.begin, iv.end)} == {3, 4}


async def test_stopping_the_drain_cancels_a_hand_off_in_progress(drained: Any) -> None:
    seen: list[str] = []

    async def callback() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    waiting = asyncio.ensure_future(drained._hand_over(callback(), False))
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
    assert await drained._hand_over(callback(1), True) is False
    drained.suspend_flow.clear()
    assert await drained._hand_over(callback(2), False) is True
    assert ran == [2]


async def test_records_the_client_consumed_but_never_handed_over_are_fetched_again(
    drained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stream_app.faust_consumer as fc

    monkeypatch.setattr(fc, "STALL_CHECK_SECONDS", 0.01)
    drain = _Drain(drained, [])
    drained._expected.sought(TP0, 1)
    positions = {TP0: 2}  # the client consumed offset 1; the loop never saw it

    async def position(tp: TP) -> int:
        return positions[tp]

    drained._thread.position = position
    watch = asyncio.ensure_future(drained._watch_for_lost_records(drained))
    try:
        await asyncio.wait_for(_until(lambda: drain.seeks), 5)
    finally:
        watch.cancel()
    assert drain.seeks[0] == (TP0, 1)


async def test_a_client_that_is_caught_up_is_left_alone(
    drained: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import stream_app.faust_consumer as fc

    monkeypatch.setattr(fc, "STALL_CHECK_SECONDS", 0.01)
    drain = _Drain(drained, [])
    drained._expected.sought(TP0, 2)

    async def position(tp: TP) -> int:
        return 2

    drained._thread.position = position
    watch = asyncio.ensure_future(drained._watch_for_lost_records(drained))
    await asyncio.sleep(0.2)
    watch.cancel()
    assert drain.seeks == []


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
        batch = {tp: [_Record(o, topic=tp.topic) for o in offs] for tp, offs in records.items()}
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
