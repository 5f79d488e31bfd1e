"""Keep record payloads out of the logs, whatever level the operator picks.

At DEBUG level Faust and aiokafka log every record they send or receive (``send: topic=..
k=.. v=..``): changelog values, partial sums, dead-letter payloads. Those are exact per-user
data, so their DEBUG messages are replaced by a placeholder that names only the logger. The
record factory is process-wide, so it survives Faust's own logging set-up.
"""

from __future__ import annotations

import logging
from typing import Any

FRAMEWORK_PREFIXES = ("faust", "aiokafka", "mode", "kafka")
PLACEHOLDER = "(framework debug message withheld: it may carry record payloads)"


def _is_framework(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in FRAMEWORK_PREFIXES)


def install() -> None:
    """Idempotent: wrap the current log record factory once."""
    current = logging.getLogRecordFactory()
    if getattr(current, "_pufferfish_redacting", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        if record.levelno < logging.INFO and _is_framework(record.name):
            record.msg, record.args = PLACEHOLDER, None
        return record

    factory._pufferfish_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
