"""What an operator meets first, through the installed ``pufferfish`` command: a busy metrics
port, a mistyped broker URL and an unreachable broker are each ONE line ``pufferfish: error:
<setting>: <message>`` naming the setting and what to do, exit 2. A URL's scheme is checked
before any connection (a listener the test owns sees none); a busy port before the broker."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.installed_cli import one_line_error, pufferfish, user_env

COMMANDS = {  # each reads the broker setting; none needs a topic to exist to fail as below
    "run": ["run"],
    "send": ["send", "-"],
    "tail": ["tail", "--max", "1"],
}
START_SLACK_S = 15  # interpreter start and imports on a loaded machine


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that accepts connections (nobody answers them)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        yield sock


def _connections(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("scheme, why", [("kafak", "unknown scheme 'kafak'"),
                                         ("http", "unknown scheme 'http'")])
def test_a_wrong_broker_scheme_fails_before_any_connection(
        command: str, scheme: str, why: str, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    url = f"{scheme}://127.0.0.1:{port}"
    proc = pufferfish([*COMMANDS[command], "--broker", url, "--timeout", "5"], timeout=60)
    error = one_line_error(proc)
    assert error["field"] == "broker"
    assert error["message"] == f"must be kafka://host:port[,host:port], got {url!r} ({why})"
    assert _connections(listener) == 0


def test_a_url_missing_a_slash_is_a_format_error_not_an_unreachable_broker() -> None:
    started = time.monotonic()
    proc = pufferfish(["run", "--timeout", "30"], user_env(broker="kafka:/127.0.0.1:1"), timeout=90)
    error = one_line_error(proc)
    assert (error["field"], error["message"]) == (
        "broker", "must be kafka://host:port[,host:port], got 'kafka:/127.0.0.1:1' (no scheme)")
    assert time.monotonic() - started < START_SLACK_S  # not the 30 s broker wait


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unreachable_broker_says_what_to_do(command: str, closed_port: int) -> None:
    url = f"kafka://127.0.0.1:{closed_port}"  # nobody listens
    started = time.monotonic()
    proc = pufferfish([*COMMANDS[command], "--broker", url, "--timeout", "2"], timeout=90)
    elapsed = time.monotonic() - started
    error = one_line_error(proc)
    assert error["field"] == "broker"
    message = error["message"]
    assert url in message and ("not reachable in 2 s" in message or "cannot connect" in message)
    assert message.endswith(": is it running? Start it, or set --broker / PUFFERFISH_BROKER to "
                            "a broker that runs (--timeout waits longer)"), message
    assert elapsed < 2 + START_SLACK_S


def test_a_busy_metrics_port_is_named_before_the_broker_is_tried(
        listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    started = time.monotonic()
    # the broker listens nowhere: had the port been checked after it, the error would be the
    # broker's, after the 30 s wait
    proc = pufferfish(["run", "--broker", "kafka://127.0.0.1:1", "--timeout", "30"],
                      user_env(metrics_port=str(port)), timeout=90)
    error = one_line_error(proc)
    assert (error["field"], error["message"]) == (
        "metrics_port", f"127.0.0.1:{port} is in use: set metrics_port (PUFFERFISH_METRICS_PORT) "
        "to a free port (0: any, off: none)")
    assert time.monotonic() - started < START_SLACK_S


# the default port, and 0 (the OS would pick it): the host is refused before any bind, and
# before the broker (which listens nowhere: tried first, its error would be the one line)
@pytest.mark.parametrize("port", ["9102", "0"])
def test_a_metrics_host_that_is_not_this_hosts_is_named_before_the_broker_is_tried(
        port: str) -> None:
    settings = {"metrics_port": port} if port == "0" else {}
    proc = pufferfish(["run", "--broker", "kafka://127.0.0.1:1", "--timeout", "30"],
                      user_env(metrics_host="192.0.2.1", **settings), timeout=90)
    error = one_line_error(proc)
    assert (error["field"], error["message"]) == (
        "metrics_host", f"cannot listen on 192.0.2.1:{port}: not an address of this host "
        "(PUFFERFISH_METRICS_HOST)")
