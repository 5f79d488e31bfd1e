"""The stop on a lost write logs one ERROR line; what follows is written at INFO, without a
traceback (stream_app/faust_adapter/quiet_stop.py). SIGTERM's deadline ends the process
(stop_deadline.py)."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from stream_app.faust_adapter.quiet_stop import QuietAfterStop, log_thread_exceptions


@pytest.fixture
def logged() -> Iterator[tuple[logging.Logger, io.StringIO, QuietAfterStop]]:
    root = logging.getLogger("test_quiet_stop")
    root.propagate = False
    root.setLevel(logging.INFO)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s %(message)s"))
    root.addHandler(handler)
    quiet = QuietAfterStop()
    quiet.install(root)
    quiet.install(root)  # once per handler
    assert handler.filters == [quiet]
    try:
        yield root, stream, quiet
    finally:
        root.removeHandler(handler)


def crash(logger: logging.Logger) -> None:
    try:
        raise RuntimeError("Event loop is closed")
    except RuntimeError as exc:
        logger.exception("Crashed reason=%r", exc)


def test_errors_before_the_stop_are_errors(
        logged: tuple[logging.Logger, io.StringIO, QuietAfterStop]) -> None:
    logger, stream, _ = logged
    crash(logging.getLogger("test_quiet_stop.mode"))
    assert "[ERROR]" in stream.getvalue() and "Traceback" in stream.getvalue()


def test_after_the_stop_line_one_error_line_and_no_traceback(
        logged: tuple[logging.Logger, io.StringIO, QuietAfterStop]) -> None:
    logger, stream, quiet = logged
    quiet.stopping(logger, "stopping the worker: %s", "a changelog record was lost")
    crash(logging.getLogger("test_quiet_stop.mode"))
    logging.getLogger("test_quiet_stop.faust").critical("We experienced a crash!")
    logger.error("tick failed (%s)", "KafkaConnectionError")
    lines = stream.getvalue().splitlines()
    assert [ln for ln in lines if "[ERROR]" in ln or "[CRITICAL]" in ln] == [
        "[ERROR] test_quiet_stop stopping the worker: a changelog record was lost"]
    assert "Traceback" not in stream.getvalue()
    assert "[INFO] test_quiet_stop.mode Crashed reason=RuntimeError('Event loop is closed')" \
        in lines  # still in the log, as what it is now: a consequence
    assert "[INFO] test_quiet_stop tick failed (KafkaConnectionError)" in lines
    logger.setLevel(logging.WARNING)  # the settings' default log_level: INFO is not written
    logger.error("tick failed (%s)", "KafkaTimeoutError")
    assert "KafkaTimeoutError" not in stream.getvalue()


def test_an_exception_that_ends_a_thread_is_logged(
        logged: tuple[logging.Logger, io.StringIO, QuietAfterStop],
        monkeypatch: pytest.MonkeyPatch) -> None:
    logger, stream, quiet = logged
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    log_thread_exceptions(logger)

    def closed_loop() -> None:
        raise RuntimeError("Event loop is closed")

    for _ in range(2):  # before the stop line, then after it
        thread = threading.Thread(target=closed_loop, name="consumer-thread")
        thread.start()
        thread.join()
        if not quiet.stopped:
            before = stream.getvalue()
            assert "[ERROR] test_quiet_stop thread consumer-thread ended by RuntimeError" in before
            assert "Traceback" in before and "Event loop is closed" in before
            quiet.stopping(logger, "stopping the worker")
            stream.seek(0)
            stream.truncate()
    after = stream.getvalue()
    assert "[INFO] test_quiet_stop thread consumer-thread ended by RuntimeError" in after
    assert "Traceback" not in after


def test_the_deadline_ends_a_process_that_does_not_stop() -> None:
    began = time.monotonic()
    code = subprocess.run(
        [sys.executable, "-c", "import time\n"
         "from stream_app.faust_adapter.stop_deadline import exit_after\n"
         "exit_after(0.5, 75)\n"
         "time.sleep(60)\n"], capture_output=True, text=True, timeout=30)
    assert code.returncode == 75, code.stderr
    assert "did not end within shutdown_timeout_seconds=0.5" in code.stderr
    assert time.monotonic() - began < 20
