"""noida-db's Kafka service as a test broker that keeps its log on disk across a restart.

tansu (the embedded broker) stores in memory only: restarted, it comes back empty. A broker
outage as it happens on Kafka (the log survives) needs a broker that persists: noida-db 0.2.3
writes under --data-dir and reads it back when started again on the same directory
(../shared/kafka.md, "Persistence across a broker restart"). Loopback only.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import IO

from stream_app.demo.broker import HOST, free_port, port_free
from stream_app.demo.broker_admin import wait_ready
from stream_app.demo.worker_process import stop_process_group
from tests.reliability import procnet
from tests.waiting import wait_for


def noida_command() -> str:
    """The `noida-db` console script of this interpreter's environment."""
    beside = Path(sys.executable).with_name("noida-db")
    found = str(beside) if beside.exists() else shutil.which("noida-db")
    if found is None:
        raise RuntimeError("noida-db is not installed: pip install noida-db==0.2.3")
    return found


class PortLost(RuntimeError):
    """noida-db could not bind the port chosen for it (another process took it first)."""


class NoidaBroker:
    """`noida-db start --only kafka` on 127.0.0.1:<port> with its data in `data_dir`.

    A broker that advertises its port cannot bind 0 and say which it got: the first start()
    is on a port free_port() chose, and on another one when that one is taken before
    noida-db binds it (noida-db then exits: "port … is already in use"). stop() ends its whole
    process group (the wrapper alone would leave the server running); start() again on the
    same port and directory brings the same log back.
    """

    START_ATTEMPTS = 3

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
        self.started_once = False  # then its clients look for it on self.port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    def start(self, timeout: float = 60.0) -> NoidaBroker:
        assert self._proc is None, "already started"
        if self.started_once:  # a restart: where the clients look, once the old one let go
            wait_for(lambda: port_free(self.port), 30, f"port {self.port} to be free again")
        attempts = 1 if self.started_once else self.START_ATTEMPTS
        for attempt in range(attempts):
            try:
                self._launch(timeout)
                self.started_once = True
                return self
            except PortLost:
                if attempt == attempts - 1:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    def _launch(self, timeout: float) -> None:
        if not port_free(self.port):
            raise PortLost(f"port {self.port} on {HOST} is in use")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [noida_command(), "start", "--only", "kafka", "--kafka-port", str(self.port),
             "--host", HOST, "--data-dir", str(self.data_dir)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # ours once its process group listens there: another broker on the port (it was
            # taken after it was chosen) would answer too, and noida-db exits when it cannot bind
            wait_for(self._listening, timeout, f"noida-db to listen on {self.bootstrap}")
            asyncio.run(wait_ready(self.bootstrap, timeout))
        except BaseException:
            self.stop()
            raise

    def _listening(self) -> bool:
        assert self._proc is not None
        if self._proc.poll() is not None:
            log = self.log_path.read_text(errors="replace")
            if f"port {self.port} is already in use" in log:
                raise PortLost(f"port {self.port} on {HOST} was taken before noida-db bound it")
            raise RuntimeError(f"noida-db exited ({self._proc.returncode}): {log[-2000:]}")
        return (HOST, self.port) in procnet.listening(procnet.descendants(self._proc.pid))

    def stop(self, grace: float = 15.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process_group(proc, grace)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> NoidaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
