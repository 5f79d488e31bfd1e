"""SIGUSR1 makes a live worker log what it waits on, without a single reported value."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Coroutine, Generator
from pathlib import Path
from typing import Any

from stream_app.demo.broker import EmbeddedBroker
from stream_app.faust_adapter.diagnostics import await_chain
from tests.processes import END, MARK
from tests.stream_app.worker_proc import (
    Reference,
    barrier,
    input_env,
    send,
    start_worker,
)

SECRET_USER = "diag-user-7f3a"
SECRET_VALUE = 3.0  # on the default grid; its text must not appear either as 3.0 nor "value"


def test_sigusr1_dumps_consumer_state_and_tasks(broker: EmbeddedBroker, tmp_path: Path) -> None:
    env = input_env(broker, tmp_path, 2, app_id="diag", domain=[0, 1, 2, 3],
                    pairs=["value_change"], budget_total="100")
    worker = start_worker(env, tmp_path, "w1")
    try:
        ref = Reference((0, 1, 2, 3), ("value_change",), 1.0)
        send(broker.bootstrap, "membership", [(SECRET_USER, ref.join(SECRET_USER))])
        send(broker.bootstrap, "reports",
             [(SECRET_USER, ref.report(SECRET_USER, SECRET_VALUE, "rid-secret-1"))])
        barrier(broker.bootstrap, 2, "diag")
        dump = worker.diagnose()
    finally:
        worker.stop()
    assert dump.startswith(MARK) and dump.endswith(END), dump[:500]
    for tp in ("reports[0]", "reports[1]", "membership[0]", "membership[1]"):
        line = next(x for x in dump.splitlines() if x.strip().startswith(tp))
        assert "position=" in line and "committed=" in line and "highwater=" in line, line
        assert "position=?" not in line, line
    assert "tasks" in dump
    # the input agent's own task: its await chain goes through Faust's actor into the agent's
    # coroutine in the project's code, not only to the task's first frame
    tasks = dump[:dump.index("\nproject coroutines\n")].split("\n--- ")[1:]
    agent = re.compile(r"in _execute_actor\n +\S+/stream_app/faust_adapter/input_agent\.py:\d+ "
                       r"in process\n")
    assert len([task for task in tasks if agent.search(task + "\n")]) == 1, dump[:3000]
    assert "stream_app/faust_adapter/input_agent.py" in dump and "in process" in dump, dump[:3000]
    assert "in _watch_for_lost_records" in dump, dump[:3000]  # the consumer's stall watch runs
    for secret in (SECRET_USER, "rid-secret-1"):
        assert secret not in dump


class _Actor:
    """Awaits its coroutine through ``__await__``, as Faust's actor awaits an agent's."""

    def __init__(self, coro: Coroutine[Any, Any, None]) -> None:
        self.coro = coro

    def __await__(self) -> Generator[Any, None, None]:
        return self.coro.__await__()


def test_await_chain_goes_through_an_actor_and_an_async_for() -> None:
    async def batches() -> AsyncIterator[int]:
        while True:
            await asyncio.sleep(60)
            yield 1

    async def agent() -> None:
        async for _ in batches():
            pass

    async def execute_actor(actor: _Actor) -> None:
        await actor

    async def main() -> list[str]:
        task = asyncio.get_running_loop().create_task(execute_actor(_Actor(agent())))
        await asyncio.sleep(0)  # the task runs until it awaits the sleep
        try:
            return await_chain(task.get_coro())
        finally:
            task.cancel()

    chain = asyncio.run(main())
    assert [line.rsplit(" in ", 1)[-1] for line in chain[:4]] == [
        "execute_actor", "agent", "batches", "sleep"], chain
    assert chain[0].startswith(__file__.removesuffix("c")), chain
