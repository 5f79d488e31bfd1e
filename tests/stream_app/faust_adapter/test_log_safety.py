import io
import logging

from stream_app.faust_adapter import log_safety


def _capture(logger_name: str, level: int, message: str, *args: object) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        logger.log(level, message, *args)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_framework_debug_payloads_are_withheld() -> None:
    log_safety.install()
    log_safety.install()  # idempotent
    out = _capture("faust.topics", logging.DEBUG, "send: topic=%s v=%r", "users", b"7777")
    assert "7777" not in out and log_safety.PLACEHOLDER in out
    out = _capture("aiokafka.producer.producer", logging.DEBUG, "Sending (value=%r)", 7777)
    assert "7777" not in out


def test_own_and_higher_level_messages_are_kept() -> None:
    log_safety.install()
    assert "seq 7" in _capture("stream_app.release", logging.DEBUG, "seq %d", 7)
    assert "rebalance 3" in _capture("faust.worker", logging.INFO, "rebalance %d", 3)
    assert "faustian" in _capture("faustian", logging.DEBUG, "faustian")
