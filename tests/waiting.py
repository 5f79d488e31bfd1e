"""One way for tests to wait: poll a named condition, never sleep a guessed duration.

The timeout only bounds a failure (success returns as soon as the condition holds), so it is
generous; the failure message names the condition: "timed out after N s waiting for <what>".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float, what: str, interval: float = 0.2, *,
    guard: Callable[[], None] | None = None, detail: Callable[[], str] | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `condition` until it returns something truthy and return that.

    `guard` runs before every poll and may raise (e.g. "the worker exited while waiting for
    <what>"); exceptions in `retry_on` raised by `condition` count as "not yet". On timeout:
    AssertionError("timed out after N s waiting for <what>"), plus the last value seen and
    `detail()` (e.g. a log tail).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        if guard is not None:
            guard()
        try:
            result = condition()
            if result:
                return result
            last = result
        except retry_on as exc:
            last = exc
        if time.monotonic() > deadline:
            extra = f" (last: {last!r})" if last not in (None, False) else ""
            if detail is not None:
                extra += f"\n{detail()}"
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)
