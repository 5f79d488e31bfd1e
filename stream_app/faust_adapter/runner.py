"""``pufferfish run``: start one worker (blocking) against the configured broker.

Settings come from ``PUFFERFISH_*`` env vars and an optional JSON file (``--config`` or
``PUFFERFISH_CONFIG_FILE``). Missing topics are created first (stream_app.kafka.topics).
SIGTERM / SIGINT stop the worker cleanly (Faust's worker handles both). A write the broker did
not acknowledge stops it with exit status 75 (stream_app/faust_adapter/write_acks.py).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pufferfish_core.errors import PufferfishInputError
from stream_app.faust_adapter import client_errors, diagnostics, log_safety, quiet_stop
from stream_app.faust_adapter.stop_deadline import exit_after
from stream_app.faust_adapter.write_acks import EXIT_WRITE_NOT_ACKNOWLEDGED
from stream_app.kafka.topics import TopicSetupError, ensure_topics
from stream_app.settings import Settings, arguments, load_settings

log = logging.getLogger("stream_app.faust_adapter.runner")

def new_event_loop(settings: Settings) -> asyncio.AbstractEventLoop:
    """The worker's event loop: uvloop (the default, faster) or asyncio's."""
    if settings.event_loop == "uvloop":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - a main dependency
            log.warning("uvloop is not installed: using asyncio's event loop")
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def worker_class() -> type:
    import faust

    class QuietWorker(faust.Worker):
        """faust.Worker without its terminal spinner: the spinner sets the root logger to
        DEBUG for the whole process, so every Faust/aiokafka debug call builds a record
        (measured: 19 % of the worker's throughput). A stop on a lost write logs one ERROR
        line (quiet_stop.py); a stop on a signal ends within the shutdown timeout
        (stop_deadline.py)."""

        def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
            self.spinner = None
            super().on_setup_root_logger(logger, level)
            if level:
                logger.setLevel(level)
            quiet = getattr(self.app, "quiet_stop", None)
            if quiet is not None:
                quiet.install(logger)

        def _schedule_shutdown(self, signal: Any) -> None:
            if not self._signal_stop_time:  # the first signal starts the stop
                app: Any = self.app  # LeanApp (faust_adapter/app.py)
                exit_after(app.shutdown_timeout_seconds, 0)
            super()._schedule_shutdown(signal)

        def _on_sigusr1(self) -> None:  # mode prints bare stacks to stderr; ours says more
            self.add_future(diagnostics.dump(self.app))

    return QuietWorker


def listen_error(settings: Settings, exc: OSError) -> PufferfishInputError:
    """The metrics server cannot listen: which setting to change, and how."""
    where = f"{settings.metrics_host}:{settings.metrics_port}"
    if exc.errno == errno.EADDRINUSE:
        return PufferfishInputError("metrics_port", f"{where} is in use: set metrics_port "
                                    "(PUFFERFISH_METRICS_PORT) to a free port (0: any, off: none)")
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return PufferfishInputError("metrics_host", f"cannot listen on {where}: not an address of "
                                    "this host (PUFFERFISH_METRICS_HOST)")
    return PufferfishInputError("metrics_port", f"cannot listen on {where}: {exc.strerror or exc}")


def check_listen(settings: Settings) -> None:
    """The metrics server's address is free to listen on (a bind, closed at once, with the
    SO_REUSEADDR the server itself uses; port 0: the host is one of this machine's); else ONE
    PufferfishInputError naming the setting."""
    if settings.metrics_port is None:  # no server
        return
    try:
        family, kind, _, _, address = socket.getaddrinfo(
            settings.metrics_host, settings.metrics_port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:
        raise listen_error(settings, exc) from None


BROKER_TRY_SECONDS = 10.0


def run_worker(settings: Settings, broker_timeout: float = 30.0,
               started: float | None = None) -> int:
    """Run one worker until SIGTERM/SIGINT (blocking). Returns the exit status: 0, or
    EXIT_WRITE_NOT_ACKNOWLEDGED when it stopped on a write the broker did not acknowledge."""
    from stream_app.faust_adapter.worker import PufferfishApp
    from stream_app.metrics import Metrics

    log_safety.install()
    quiet_stop.log_thread_exceptions(log)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    loop = new_event_loop(settings)
    asyncio.set_event_loop(loop)
    metrics = Metrics.create()
    client_errors.count_client_errors(metrics.broker_errors)
    # bad priors, pairs or a corrupt local state fail here, before any broker call
    worker_app = PufferfishApp(settings, metrics)
    check_listen(settings)  # a busy port fails now, not after the broker is joined
    ports = worker_app.app.ports
    try:
        ports.start()  # any earlier process's ports file is replaced before anything listens
    except OSError as exc:
        raise PufferfishInputError("ports_file", f"cannot write {settings.ports_file}: "
                                   f"{exc.strerror or exc}") from None
    loop.run_until_complete(ensure_topics(settings, broker_wait(broker_timeout, started),
                                          shown=broker_timeout))
    # how releases are published (transactions or at-least-once), said once
    loop.run_until_complete(worker_app.releaser.publisher.delivery.announce())
    if settings.metrics_port is not None:
        try:
            port = metrics.serve(settings.metrics_host, settings.metrics_port)
        except OSError as exc:  # taken since check_listen
            raise listen_error(settings, exc) from None
        ports.listening("metrics", port)
    worker = worker_class()(
        worker_app.app, loglevel=settings.log_level.upper(), quiet=True, loop=loop,
        redirect_stdouts=False,
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        if worker_app.write_failure is not None:
            return EXIT_WRITE_NOT_ACKNOWLEDGED
        if exc.code not in (0, None):
            raise
    return EXIT_WRITE_NOT_ACKNOWLEDGED if worker_app.write_failure is not None else 0


def broker_wait(broker_timeout: float, started: float | None) -> float:
    """Seconds left for the broker: --timeout counts from the process's ``started``
    (interpreter and imports included), but the broker is always tried for at least
    BROKER_TRY_SECONDS (or --timeout, if shorter): on a busy machine the start-up alone can
    use up the timeout, and 'not reachable' must then still mean the broker was tried."""
    left = broker_timeout - (time.monotonic() - started) if started is not None \
        else broker_timeout
    return max(left, min(BROKER_TRY_SECONDS, broker_timeout))


def _error(message: str) -> int:
    print(f"pufferfish: error: {message}", file=sys.stderr)
    return 2


def process_started() -> float:
    """When this process started, on ``time.monotonic``'s clock (Linux: /proc/self/stat; else
    now): --timeout bounds the command from its start, interpreter and imports included."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.monotonic()
    return time.monotonic() - max(age, 0.0)


def main(argv: Sequence[str] | None = None) -> int:
    started = process_started()
    parser = arguments.CommandParser(
        "pufferfish run",
        "Run one worker until SIGTERM or Ctrl-C: it creates the missing topics, applies the "
        "reports and membership events of its input partitions and publishes releases and "
        "learning rounds on the public clock. Settings: PUFFERFISH_* variables and a JSON file "
        "(docs/operations.md, \"Settings\").",
        epilog="Exit status: 0 stopped; 2 bad settings or an unreachable broker (one line on "
        "stderr); 75 a write the broker did not acknowledge.")
    arguments.add_config(parser)
    arguments.add_broker(parser)
    arguments.add_timeout(parser, 30.0, "at start, from the process's start (and at least "
                          "10 s once it tries the broker)")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        settings = load_settings(args.config, {"broker": args.broker} if args.broker else {})
        return run_worker(settings, args.timeout, started)
    except (PufferfishInputError, TopicSetupError) as exc:
        return _error(str(exc))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
