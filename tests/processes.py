"""Whether a process still exists (for tests that check nothing is left behind), and what a
live worker is waiting on (for failure messages, and for the test of that dump)."""

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
END = "end of diagnostics"  # the dump's last line: the block is whole once it is in the log


def task_dump(pid: int, read_log: Callable[[], str], timeout: float = 10.0) -> str:
    """Ask a live worker for its diagnostics (SIGUSR1, stream_app/faust_adapter/diagnostics.py)
    and return the new block of its log, from MARK to END, once the log holds all of it."""
    before = read_log().count(MARK)
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        return "(worker gone: no diagnostics)"
    deadline = time.monotonic() + timeout
    block = ""
    while time.monotonic() < deadline:
        text = read_log()
        if text.count(MARK) > before:
            block = text[text.rindex(MARK):]
            if END in block:
                return block[:block.index(END) + len(END)]
        time.sleep(0.2)
    return f"{block}\n(no whole diagnostics block within {timeout:g} s)"
