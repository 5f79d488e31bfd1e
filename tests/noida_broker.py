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
from tests.waiting import wait_for


def noida_command() -> str:
    """The `noida-db` console script of this interpreter's environment."""
    beside = Path(sys.executable).with_name("noida-db")
    found = str(beside) if beside.exists() else shutil.which("noida-db")
    if found is None:
        raise RuntimeError("noida-db is not installed: pip install noida-db==0.2.3")
    return found


class NoidaBroker:
    """`noida-db start --only kafka` on 127.0.0.1:<port> with its data in `data_dir`.

    stop() ends its whole process group (the wrapper alone would leave the server running);
    start() again on the same port and directory brings the same log back.
    """

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.port = free_port()
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
        wait_for(lambda: port_free(self.port), 30, f"port {self.port} to be free again")
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(
            [noida_command(), "start", "--only", "kafka", "--kafka-port", str(self.port),
             "--host", HOST, "--data-dir", str(self.data_dir)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            asyncio.run(wait_ready(self.bootstrap, timeout))
        except BaseException:
            self.stop()
            raise
        return self

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
