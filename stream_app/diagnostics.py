"""``kill -USR1 <worker pid>``: log what every task of the worker is waiting on.

(stream_app/runner.py routes the worker's SIGUSR1 here, in place of mode's bare stacks.)

For a worker that is alive but not consuming: the log gets one block with the consumer's
assignment, its paused partitions, whether Faust's flow is suspended, the fetch position and
committed offset of every assigned input partition, and the stack of every asyncio task. Code
locations and offsets only: no record, value or user id is printed (log_safety).
"""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

log = logging.getLogger("stream_app.diagnostics")


async def dump(app: Any) -> None:
    """Log the consumer state and every task's stack (one WARNING record)."""
    out = io.StringIO()
    out.write("diagnostics (SIGUSR1)\n")
    try:
        out.write(await _consumer_state(app))
    except Exception as exc:  # noqa: BLE001 - a dump must never take the worker down
        out.write(f"consumer state unavailable: {type(exc).__name__}: {exc}\n")
    tasks = asyncio.all_tasks()
    out.write(f"{len(tasks)} tasks\n")
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"--- {task.get_name()} {task.get_coro()!r}\n")
        task.print_stack(limit=12, file=out)
    log.warning("%s", out.getvalue())


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
