"""The worker's consumer (stream_app/faust_consumer.py). drain_eager: the callback runs inline
when it need not wait, and a callback that waits is still abandoned when the flow is suspended
(Faust's rebalance safety). consumer_fetch_max_wait_seconds reaches aiokafka's fetcher."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

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

    result = await consumer.wait_first(callback(), consumer.suspend_flow.wait())
    assert ran_in == [caller]  # no task was made for it
    assert result.results == ["done"] and not result.stopped


async def test_a_waiting_callback_completes_in_wait_first(consumer: Any) -> None:
    gate = asyncio.Event()

    async def callback() -> str:
        await gate.wait()
        return "late"

    waiting = asyncio.ensure_future(
        consumer.wait_first(callback(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    gate.set()
    result = await asyncio.wait_for(waiting, 5)
    assert result.results == ["late"]


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
        consumer.wait_first(callback(), consumer.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    consumer.suspend_flow.set()  # a rebalance starts
    result = await asyncio.wait_for(waiting, 5)
    await asyncio.sleep(0)
    assert seen == ["abandoned"]
    assert result.results == [True] and len(result.done) == 1  # only suspend_flow.wait() won


async def test_a_callback_error_propagates(consumer: Any) -> None:
    async def callback() -> None:
        raise ValueError("bad record")

    with pytest.raises(ValueError, match="bad record"):
        await consumer.wait_first(callback(), consumer.suspend_flow.wait())


async def test_other_waits_are_faust_s(consumer: Any) -> None:
    async def one() -> int:
        await asyncio.sleep(0)
        return 1

    async def two() -> int:
        await asyncio.sleep(10)
        return 2

    result = await consumer.wait_first(one(), two())
    assert result.results == [1]


async def test_off_by_default_every_wait_is_faust_s() -> None:
    cons = _app().consumer
    caller = asyncio.current_task()
    ran_in: list[Any] = []

    async def callback() -> None:
        ran_in.append(asyncio.current_task())

    await cons.wait_first(callback(), cons.suspend_flow.wait())
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
