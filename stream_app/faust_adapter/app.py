"""The Faust application class and the Faust settings of a worker (docs/design.md, "Throughput")."""

from __future__ import annotations

from typing import Any

import faust
from aiohttp.web import BaseSite, SockSite
from faust.sensors import Monitor
from faust.web.drivers.aiohttp import Web as AiohttpWeb
from mode.utils.objects import cached_property
from mode.utils.queues import FlowControlEvent

from stream_app.faust_adapter.consumer import (
    ConsumerTuning,
    PufferfishConsumer,
    PufferfishTransport,
)
from stream_app.faust_adapter.flow import RefetchingFlowControl
from stream_app.faust_adapter.ports_file import PortsFile, listening_socket
from stream_app.faust_adapter.quiet_stop import QuietAfterStop
from stream_app.settings import Settings

# Faust consumer/stream buffers (measured +11 % together; docs/design.md, "Throughput").
STREAM_BUFFER_MAXSIZE = 65536
BROKER_MAX_POLL_RECORDS = 10000
CONSUMER_MAX_FETCH_SIZE = 4 * 1024 * 1024

# Faust's built-in web views other than its plain index at "/" ({"status": "OK"}): /table hands
# out any key of any table (a user's stored state, the exact partials), /router the workers of
# the cluster, the statistics at "/" and /graph the worker's internals, /performance the
# Monitor's figures (docs/privacy.md, "Threat model"). Turned off on the built app:
# Faust's APP_WEB_*_ENABLED environment variables win over App keyword arguments.
WEB_VIEWS_OFF = ("web_tables_enabled", "web_router_enabled", "web_stats_enabled",
                 "web_graph_enabled", "web_metrics_enabled")


class MonitorlessApp(faust.App):
    """A Faust app without the Monitor sensor (+8 %): its stats feed only Faust's web views,
    which the worker does not serve; our own metrics are stream_app.metrics. Otherwise stock
    Faust (the throughput bench's stock pipelines)."""

    def on_init_dependencies(self) -> Any:
        deps = super().on_init_dependencies()
        monitor = self._monitor
        if isinstance(monitor, Monitor) and monitor in self.sensors:
            self.sensors.remove(monitor)
        return deps


class ReportingWeb(AiohttpWeb):
    """Faust's aiohttp web server on a socket of its own, bound to web_bind and the
    ``web_port`` setting, 0 included (the OS picks; Faust's own setting refuses 0), and the
    port it got written to the ports file (stream_app/faust_adapter/ports_file.py)."""

    app: LeanApp
    bound_port = 0  # the port it listens on, once started

    def _new_transport_tcp(self) -> BaseSite:
        sock = listening_socket(self.app.conf.web_bind, self.app.web_listen_port)
        self.bound_port = int(sock.getsockname()[1])
        return SockSite(self._runner, sock, ssl_context=self.app.conf.web_ssl_context)

    async def start_server(self) -> None:
        await super().start_server()
        self.app.ports.listening("web", self.bound_port)


class LeanApp(MonitorlessApp):
    """The worker's Faust app: no Monitor sensor, the worker's consumer and transport
    (stream_app/faust_adapter/consumer.py), flow control (stream_app/faust_adapter/flow.py)
    and web server (ReportingWeb)."""

    consumer_tuning: ConsumerTuning | None = None
    quiet_stop: QuietAfterStop | None = None  # the log filter of a stop on a lost write
    shutdown_timeout_seconds = 10.0  # the settings' (stop_deadline.py)
    web_listen_port = 0  # the web_port setting (0: the OS picks); conf.web_port is Faust's
    ports = PortsFile(None)  # where the servers' ports are written (the ports_file setting)

    def _new_transport(self) -> Any:
        return PufferfishTransport(self.conf.broker_consumer, self)

    def _new_web(self) -> Any:
        return ReportingWeb(self)

    @cached_property
    def flow_control(self) -> FlowControlEvent:
        """Faust's, but records it wipes from stream buffers are fetched again
        (stream_app/faust_adapter/flow.py)."""
        return RefetchingFlowControl(loop=self.loop, on_dropped=self._refetch)

    def _refetch(self, first: dict[Any, int]) -> None:
        consumer = self.consumer
        if isinstance(consumer, PufferfishConsumer):
            consumer.refetch(first, "Faust's flow control emptied the stream buffer")


def new_app(s: Settings, app_id: str, **options: Any) -> LeanApp:
    """The worker's Faust app (also the throughput bench's): LeanApp with the consumer tuning
    of the settings (stream_app/faust_adapter/consumer.py) and no web view but Faust's index."""
    app = LeanApp(app_id, **options)
    for setting in WEB_VIEWS_OFF:
        setattr(app.conf, setting, False)
    app.consumer_tuning = ConsumerTuning(
        fetch_max_wait_ms=round(s.consumer_fetch_max_wait_seconds * 1000),
        aligned_topics=(None if s.topic_reports == s.topic_membership
                        else (s.topic_reports, s.topic_membership)),
    )
    app.quiet_stop = QuietAfterStop()
    app.shutdown_timeout_seconds = s.shutdown_timeout_seconds
    app.web_listen_port = s.web_port or 0
    app.ports = PortsFile(s.ports_file)
    return app


def app_options(s: Settings) -> dict[str, Any]:
    """The Faust settings the worker and the throughput bench (bench/throughput.py) share:
    at-least-once, one replica, from the earliest offset, the standby replicas, producer batching
    and broker timeouts from the settings, and the buffer sizes above."""
    return {
        "autodiscover": False, "processing_guarantee": "at_least_once",
        "topic_partitions": s.input_partitions, "topic_replication_factor": 1,
        "table_standby_replicas": s.table_standby_replicas,
        "consumer_auto_offset_reset": "earliest",
        "producer_max_batch_size": s.producer_max_batch_size,
        "producer_linger": s.producer_linger_seconds,
        "stream_buffer_maxsize": STREAM_BUFFER_MAXSIZE,
        "broker_max_poll_records": BROKER_MAX_POLL_RECORDS,
        "consumer_max_fetch_size": CONSUMER_MAX_FETCH_SIZE,
        "broker_session_timeout": s.broker_session_timeout,
        "broker_rebalance_timeout": s.broker_rebalance_timeout,
        "broker_heartbeat_interval": s.broker_heartbeat_interval,
        "broker_commit_interval": s.broker_commit_interval_seconds,
    }
