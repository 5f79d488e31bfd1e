"""SIGTERM (or SIGINT) stops the worker within ``shutdown_timeout_seconds``, whatever it waits
on (docs/operations.md, "Exit status and stop").

Faust's stop flushes the producer, commits and leaves the consumer group: with the broker gone,
each of those waits for the broker's timeouts and retries (a worker whose broker had stopped was
still in Faust's producer flush 60 s after SIGTERM: tests/reliability/test_stop_deadline.py). A
timer thread (it runs while the event loop is blocked) ends the process if it is still there
when the timeout expires. Nothing is lost: input whose writes were not acknowledged is not
committed, and a restart processes it again.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger(__name__)


def exit_after(seconds: float, status: int) -> threading.Timer:
    """Exit the process with `status` if it still runs `seconds` from now."""
    def expire() -> None:
        log.warning("the stop did not end within shutdown_timeout_seconds=%g: exiting now "
                    "(input not committed is processed again after a restart)", seconds)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os._exit(status)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer
