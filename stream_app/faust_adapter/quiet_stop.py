"""A stop the worker explains in one ERROR line ends without more ERROR lines or tracebacks
(docs/operations.md, "Exit status and stop").

A write the broker did not acknowledge stops the worker (input_agent.py): it logs why, once, then
crashes the Faust app so that every service stops at once. What follows is consequence, not news:
mode logs the crash again with a traceback ("Crashed reason=..."), the worker repeats it
("We experienced a crash!"), a task that finds the event loop closed, or a release tick whose
producer has stopped, log theirs. Once the stop line is logged, each later ERROR or CRITICAL
record is written at INFO (so not at all under the default log_level, warning), without its
traceback: an operator (or an alert on ERROR lines) sees one line. An exception that ends a
thread (mode runs the Kafka clients in threads) goes to the log too, instead of bare to stderr.
"""

from __future__ import annotations

import logging
import threading

STOP_LINE = "pufferfish_stop_line"  # the LogRecord attribute that marks the stop line


class QuietAfterStop(logging.Filter):
    """A handler filter: after ``stopping`` (the stop line), ERROR and above become INFO."""

    def __init__(self) -> None:
        super().__init__()
        self.stopped = False

    def stopping(self, logger: logging.Logger, msg: str, *args: object) -> None:
        """Log the stop line (ERROR); from then on, the records after it are demoted."""
        self.stopped = True
        logger.error(msg, *args, extra={STOP_LINE: True})

    def filter(self, record: logging.LogRecord) -> bool:
        if (self.stopped and record.levelno >= logging.ERROR
                and not getattr(record, STOP_LINE, False)):
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)  # log_level
        return True

    def install(self, logger: logging.Logger) -> None:
        """On every handler of `logger` (the root logger: every record passes them)."""
        for handler in logger.handlers:
            if self not in handler.filters:
                handler.addFilter(self)


def log_thread_exceptions(logger: logging.Logger) -> None:
    """Python prints an exception that ends a thread to stderr, traceback and all, whatever
    the logging: log it instead (ERROR with its traceback; after a stop line, demoted)."""
    def hook(args: threading.ExceptHookArgs) -> None:
        if issubclass(args.exc_type, SystemExit):
            return
        name = args.thread.name if args.thread is not None else "?"
        logger.error("thread %s ended by %s", name, args.exc_type.__name__,
                     exc_info=args.exc_value)

    threading.excepthook = hook
