"""Shared fixtures. Broker fixtures start a real tansu broker on a free loopback port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_app.local.broker import EmbeddedBroker
from tests.kafka_helpers import consume_all, json_values, produce_json

__all__ = ["consume_all", "json_values", "produce_json"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs a real broker or server started by the test"
    )


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A fresh embedded broker for one test (log: tmp_path/tansu.log), stopped afterwards."""
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as b:
        yield b


@pytest.fixture(scope="module")
def broker_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One embedded broker shared by the tests of a module; use distinct topic names per test."""
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as b:
        yield b
