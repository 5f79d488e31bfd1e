"""Shared fixtures, and the rules that let the suite run in parallel (pytest-xdist).

`scripts/test.sh` runs the suite with `-n 4 --dist loadgroup`; `pytest FILE` alone still
runs serially. Every test must be isolated from the tests running beside it:

- brokers: its own (`broker`), or one shared per module and worker process (`broker_module`;
  Apache Kafka: `kafka_broker`, one per worker process)
  with topic names, app id and consumer group of its own (uuid-suffixed);
- ports: from the OS and never chosen then bound: a server binds port 0 and reports the port it
  got (a worker in its ports file, Prometheus in its log: tests/ports.py); an address where
  nothing may listen is the `closed_port` fixture (held bound, never listened on); only the
  brokers that must be told their port use `free_port()` (tests/test_suite_rules.py);
- files: under its own `tmp_path` / `tmp_path_factory`, never a fixed path;
- servers it starts (workers, Prometheus, brokers) are stopped by the test or its fixture;
- the process environment: restored after every test (`_environment_restored`; an in-process
  `load_settings(config)` sets PUFFERFISH_CONFIG_FILE, which later tests would read).

A module-scoped fixture is computed once per worker process that runs a test using it. When it
is expensive (subprocesses, a build, a worker run), the module declares
`pytestmark = pytest.mark.xdist_group("<module>")` so that one process runs all its tests and
the fixture once (tests/test_suite_rules.py checks every module-scoped fixture has one).

Tests marked `slow` (≥ ~15 s alone on an idle machine) are started first, then the other
integration tests, then the rest: the longest ones must not start last, or they set the wall
time of the whole run.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stream_app.demo.broker import EmbeddedBroker
from tests import ports
from tests.kafka_broker import KafkaBroker
from tests.kafka_helpers import consume_all, json_values, produce_json

__all__ = ["consume_all", "json_values", "produce_json"]


@pytest.fixture(autouse=True)
def _environment_restored() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def _log_levels_restored() -> Iterator[None]:
    """Every logger's level as it was: a CLI tool run in-process silences aiokafka for good
    (stream_app.tools.common.quiet_kafka_logs, right for a CLI process), and a later test in
    the same process then saw none of the client's records (run K: test_client_errors)."""
    loggers = [logging.getLogger(), *(logger for logger in logging.root.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger))]
    saved = [(logger, logger.level, logger.disabled) for logger in loggers]
    yield
    for logger, level, disabled in saved:
        if (logger.level, logger.disabled) != (level, disabled):
            logger.setLevel(level)
            logger.disabled = disabled


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-log", default=None, metavar="PATH",
                     help="append each test's wall and CPU seconds to PATH as JSON lines")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: needs a real broker or server started by the test"
    )


def start_rank(item: pytest.Item) -> int:
    """0 for slow tests, 1 for other integration tests, 2 for the rest."""
    if item.get_closest_marker("slow") is not None:
        return 0
    if item.get_closest_marker("integration") is not None:
        return 1
    return 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # stable sort: every xdist worker collects the same order, as it must
    items.sort(key=start_rank)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A fresh embedded broker for one test (log: tmp_path/tansu.log), stopped afterwards."""
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as b:
        yield b


@pytest.fixture(scope="module")
def broker_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One embedded broker shared by the tests of a module (per worker process); use distinct
    topic names, app ids and consumer groups per test."""
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with EmbeddedBroker(log_path=log) as b:
        yield b


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, reserved for the test (tests/ports.py)."""
    with ports.closed_port() as port:
        yield port


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """Apache Kafka 2.3.0 with its ZooKeeper (tests/kafka_broker.py): one per xdist process,
    started at its first use (~4 s, ~400 MB) and stopped at the end of the session. Tests on it
    use topic names, app ids, consumer groups and transactional ids of their own; a module on
    it declares `pytest.mark.xdist_group("kafka")`, so that one process runs them all beside
    one broker. Never stopped by a test: a test that stops or restarts Kafka starts its own."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as b:
        yield b


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """With --cpu-log PATH: one JSON line per test with its wall time and the CPU seconds of
    this process and of the children it waited for (workers, CLI runs, brokers a test starts),
    the table "Where the time goes" in tests/README.md (scripts/test_cpu.py)."""
    path = item.config.getoption("--cpu-log")
    if not path:
        yield
        return
    before, wall = _cpu_seconds(), time.monotonic()
    yield
    line = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 3),
            "cpu": round(_cpu_seconds() - before, 3)}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
