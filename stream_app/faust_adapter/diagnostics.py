"""``kill -USR1 <worker pid>``: log what every task of the worker is waiting on.

(stream_app/faust_adapter/runner.py routes the worker's SIGUSR1 here, in place of mode's bare
stacks.)

For a worker that is alive but not consuming: the log gets one block with the consumer's
assignment, its paused partitions, whether Faust's flow is suspended, the fetch position and
committed offset of every assigned input partition, and the stack of every asyncio task. Code
locations and offsets only: no record, value or user id is printed (log_safety). The block
starts with ``HEADER`` and ends with ``FOOTER``: a reader of the log knows it has all of it.
"""

from __future__ import annotations

import asyncio
import gc
import io
import logging
import os
import types
from typing import Any

log = logging.getLogger("stream_app.faust_adapter.diagnostics")

HEADER = "diagnostics (SIGUSR1)"
FOOTER = "end of diagnostics"
# Awaitables without a frame of their own that stand for a coroutine or an async generator:
# ``coro.__await__()`` (how Faust's actor awaits its agent's coroutine) and the steps of an
# ``async for`` (how an agent awaits its stream's batches).
_WRAPPERS = ("coroutine_wrapper", "async_generator_asend", "async_generator_athrow")


async def dump(app: Any) -> None:
    """Log the consumer state and every task's stack (one WARNING record)."""
    out = io.StringIO()
    out.write(f"{HEADER}\n")
    try:
        out.write(await _consumer_state(app))
    except Exception as exc:  # noqa: BLE001 - a dump must never take the worker down
        out.write(f"consumer state unavailable: {type(exc).__name__}: {exc}\n")
    tasks = asyncio.all_tasks()
    out.write(f"{len(tasks)} tasks\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"--- {task.get_name()}\n")
        for where in await_chain(task.get_coro()):
            out.write(f"    {where}\n")
    # also every suspended coroutine and async generator of the project, each with what it
    # awaits (one that waits inside another task's chain is listed on its own too)
    out.write("project coroutines\n")
    for obj in gc.get_objects():
        if isinstance(obj, types.CoroutineType | types.AsyncGeneratorType):
            frame = getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)
            if frame is not None and f"{os.sep}stream_app{os.sep}" in frame.f_code.co_filename:
                out.write(f"--- {frame.f_code.co_name}\n")
                for where in await_chain(obj):
                    out.write(f"    {where}\n")
    out.write(f"{FOOTER}\n")
    log.warning("%s", out.getvalue())


def await_chain(coro: Any, limit: int = 40) -> list[str]:
    """Where a suspended coroutine waits, outermost first: each awaited coroutine's (or async
    generator's) current line, through the wrappers that await one (``_WRAPPERS``: an
    agent's task reaches the agent's own coroutine). asyncio's own task stacks stop at the
    task's first frame."""
    chain: list[str] = []
    while coro is not None and len(chain) < limit:
        coro = _unwrapped(coro)
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(
            coro, "ag_frame", None)
        if frame is None:
            chain.append(repr(coro)[:120])
            break
        code = frame.f_code
        chain.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        coro = (getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
                or getattr(coro, "ag_await", None))
    return chain


def _unwrapped(awaitable: Any) -> Any:
    """The coroutine or async generator a ``_WRAPPERS`` awaitable stands for (the wrapper
    holds it, unnamed: gc finds it among its referents); anything else as it is."""
    if type(awaitable).__name__ in _WRAPPERS:
        for inner in gc.get_referents(awaitable):
            if isinstance(inner, types.CoroutineType | types.AsyncGeneratorType):
                return inner
    return awaitable


async def _consumer_state(app: Any) -> str:
    lines = [
        f"rebalancing={app.rebalancing} in_recovery={getattr(app, 'in_recovery', None)} "
        f"flow_active={app.flow_control.is_active()}",
    ]
    consumer = app.consumer
    lines.append(f"consumer flow_active={getattr(consumer, 'flow_active', None)} "
                 f"can_resume_flow={getattr(consumer, 'can_resume_flow', None)}")
    assigned = sorted(consumer.assignment())
    paused = set(getattr(consumer, "_paused_partitions", set()) or set())
    committed = dict(getattr(consumer, "_committed_offset", {}) or {})
    thread = consumer._thread  # Faust's consumer thread: calls go through its own loop
    try:
        fetcher_paused = set(thread._ensure_consumer().paused())
    except Exception:  # noqa: BLE001
        fetcher_paused = set()
    for tp in assigned:
        try:
            position: Any = await asyncio.wait_for(thread.position(tp), 5.0)
            highwater: Any = thread.highwater(tp)
        except Exception as exc:  # noqa: BLE001
            position = highwater = f"? ({type(exc).__name__})"
        lines.append(f"  {tp.topic}[{tp.partition}] faust_paused={tp in paused} "
                     f"fetcher_paused={tp in fetcher_paused} position={position} "
                     f"committed={committed.get(tp)} highwater={highwater}")
    return "\n".join(lines) + "\n"
