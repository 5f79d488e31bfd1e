"""drain_eager (stream_app/eager_drain.py): the callback runs inline when it need not wait, and a
callback that waits is still abandoned when the flow is suspended (Faust's rebalance safety)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stream_app.eager_drain import EagerDrainConsumer, _Resumed
from stream_app.faust_app import EagerDrainApp, LeanApp, app_class
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


@pytest.fixture
async def consumer() -> Any:
    app = EagerDrainApp("eager-test", broker="kafka://127.0.0.1:1", store="memory://",
                        web_enabled=False)
    cons = app.consumer
    assert isinstance(cons, EagerDrainConsumer)
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


def test_the_setting_picks_the_app_class() -> None:
    assert app_class(Settings(drain_eager=True)) is EagerDrainApp
    assert app_class(Settings()) is LeanApp
