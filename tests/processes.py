"""Whether a process still exists (for tests that check nothing is left behind)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True while `pid` exists (a zombie not yet reaped counts as existing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
