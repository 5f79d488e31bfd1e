"""The ports file: where the worker's servers listen, for whoever started it (``ports_file``).

``metrics_port`` or ``web_port`` 0 lets the OS pick a free port when the server binds it: no
port is chosen first and bound later, so none can be taken in between (the test suite runs
its workers so). The worker then writes the ports it got, as one JSON object, to the path
``ports_file`` names (None: no file)::

    {"pid": 4242, "metrics": 40321, "web": 40987}

``pid`` is the worker's process id, written first, before any server listens: a file left by
an earlier process is replaced then, and a reader that knows the pid it started never takes
another process's ports. ``metrics`` appears once the metrics server listens (after the
topics are checked, before the consumer group is joined), ``web`` once Faust's web server
does; a server that is off never appears. Every write replaces the whole file (a temporary
file renamed over it): a reader sees the previous content or the new one, never a part.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

SERVERS = ("metrics", "web")


class PortsFile:
    """The writer: one per worker process (``path`` None: writes nothing)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.ports: dict[str, int] = {}

    def start(self) -> None:
        """Replace any earlier file with this process's pid alone (OSError: not writable)."""
        self.ports = {}
        self._write()

    def listening(self, server: str, port: int) -> None:
        """``server`` ("metrics" or "web") listens on ``port``: add it to the file."""
        assert server in SERVERS, server
        self.ports[server] = port
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"pid": os.getpid(), **self.ports}), encoding="utf-8")
        os.replace(temporary, self.path)


def reported_port(path: Path, server: str, pid: int | None) -> int | None:
    """The port ``server`` of process ``pid`` listens on, as its ports file says; None while
    the file is missing, is another process's, or does not name that server yet. ``pid`` None:
    whichever process wrote it (a path no other process writes to)."""
    try:
        written = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(written, dict) or (pid is not None and written.get("pid") != pid):
        return None
    port = written.get(server)
    return port if isinstance(port, int) and port > 0 else None


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port (0: a port the OS picks), with SO_REUSEADDR as
    aiohttp's own sites and the metrics server set it; IPv4 or IPv6 as ``host`` resolves."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock
