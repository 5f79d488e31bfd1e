"""Ports in the suite: none is chosen, released, then bound by another process (tests/README.md,
"Ports from the OS": eight xdist processes start servers at once, and a port free a moment ago
may be someone else's by the time it is bound).

- A server a test starts binds port 0 and reports the port the OS gave it: a worker
  (`pufferfish run`, metrics and Faust web) in its ports file (the `ports_file` setting,
  stream_app/faust_adapter/ports_file.py), read here by `worker_port`; Prometheus in its log
  (tests/deploy/support.py).
- A test that needs an address where nothing listens takes `closed_port()` (the `closed_port`
  fixture): the port stays bound, never listened on, for as long as the test holds it, so no
  other test's server can be given it and a connection to it is refused.
- A broker that must know its port before it binds (it advertises it; tansu and noida-db
  cannot bind 0 and say which port they got) is the one exception: `free_port()`, with a
  retry on a new port when the chosen one is taken (stream_app/demo/broker.py). Where it may
  be used is listed in tests/test_suite_rules.py.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from stream_app.faust_adapter.ports_file import reported_port
from tests.waiting import wait_for

HOST = "127.0.0.1"
REPORT_TIMEOUT = 60.0  # the metrics port comes once the topics are checked (a broker's answer)


def worker_port(ports_file: Path, server: str, proc: subprocess.Popen[bytes],
                log: Callable[[], str] | None = None, timeout: float = REPORT_TIMEOUT) -> int:
    """The port the worker process `proc` reports for `server` ("metrics" or "web") in
    `ports_file`, once it does; AssertionError if it exits first or does not within
    `timeout`."""
    what = f"the worker's {server} port in {ports_file.name}"

    def guard() -> None:
        if proc.poll() is not None:
            tail = f":\n{log()}" if log is not None else ""
            raise AssertionError(f"the worker exited ({proc.returncode}) while waiting for "
                                 f"{what}{tail}")

    port = wait_for(lambda: reported_port(ports_file, server, proc.pid), timeout, what,
                    guard=guard, detail=log)
    assert port is not None  # wait_for returns a truthy value
    return port


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, held for the block: bound (so the OS gives it
    to no one else) but never listened on (so a connection is refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        yield int(sock.getsockname()[1])
