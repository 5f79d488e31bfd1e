"""When the releaser falls back to at-least-once (stream_app/release/delivery.py): only on the
errors that say the broker has no transactions, only before this process was granted a
transactional producer id, never with release_transactions=required; and the worker says it
(`pufferfish run` on tansu: one warning with auto, one error line and exit 2 with required)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailed,
    UnknownError,
    UnsupportedVersionError,
)

from stream_app.demo.broker import EmbeddedBroker
from stream_app.release.delivery import Delivery, TransactionsUnavailable
from stream_app.settings import Settings
from tests.stream_app.worker_proc import REPO


def delivery(mode: str) -> Delivery:
    return Delivery(Settings(metrics_port=None, release_transactions=mode))  # type: ignore[arg-type]


@pytest.mark.parametrize("exc", [UnknownError(), UnsupportedVersionError()])
def test_auto_falls_back_on_a_broker_without_transactions_and_says_it_once(
        exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    d = delivery("auto")
    with caplog.at_level(logging.WARNING):
        assert d.refused(exc) and d.transactional is False
        assert not d.refused(exc)  # decided: said once
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage().startswith(
        f"releases are at-least-once: the broker has no transactions "
        f"(InitProducerId: {type(exc).__name__})")


@pytest.mark.parametrize("exc", [TransactionalIdAuthorizationFailed(), KafkaConnectionError(),
                                 RequestTimedOutError(), TimeoutError()])
def test_auto_never_falls_back_on_other_errors(exc: Exception) -> None:
    d = delivery("auto")
    assert not d.refused(exc) and d.transactional is None  # the claim's error is raised


def test_auto_never_falls_back_once_a_transactional_id_was_granted() -> None:
    d = delivery("auto")
    d.granted()
    assert not d.refused(UnknownError()) and d.transactional is True


def test_required_refuses_a_broker_without_transactions() -> None:
    d = delivery("required")
    with pytest.raises(TransactionsUnavailable, match="^release_transactions: required, but "
                       "the broker has no transactions"):
        d.refused(UnknownError())
    assert d.transactional is None


def test_off_is_at_least_once_from_the_start() -> None:
    assert delivery("off").transactional is False


def run(broker: EmbeddedBroker, tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update({"PUFFERFISH_BROKER": broker.url, "PUFFERFISH_RELEASE_TRANSACTIONS": mode,
                "PUFFERFISH_DATA_DIR": str(tmp_path), "PUFFERFISH_METRICS_PORT": "off",
                "PYTHONPATH": str(REPO)})
    return subprocess.run([sys.executable, "-m", "stream_app", "run"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=str(REPO))


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_required_on_tansu_is_one_error_line_and_exit_2(broker: EmbeddedBroker,
                                                       tmp_path: Path) -> None:
    proc = run(broker, tmp_path, "required")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("pufferfish: error: release_transactions: required, but the "
                               "broker has no transactions (InitProducerId: UnknownError)")
