"""Whether a process still exists (for tests that check nothing is left behind), and what a
live worker is waiting on (for failure messages)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable


def pid_alive(pid: int) -> bool:
    """True while `pid` exists (a zombie not yet reaped counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


MARK = "diagnostics (SIGUSR1)"


def task_dump(pid: int, read_log: Callable[[], str], timeout: float = 10.0) -> str:
    """Ask a live worker for its diagnostics (SIGUSR1, stream_app/faust_adapter/diagnostics.py)
    and return the new block of its log: for a failure message about a worker that stopped
    consuming."""
    before = read_log().count(MARK)
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return "(worker gone: no diagnostics)"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = read_log()
        if text.count(MARK) > before:
            return text[text.rindex(MARK):][:20000]
        time.sleep(0.2)
    return f"(no diagnostics within {timeout:g} s)"
