"""The Faust pipelines of the throughput benchmark (bench/throughput.py), one per process:
``python -m bench.faust_pipelines KIND``, settings from the worker's PUFFERFISH_* variables.
Progress is exported as ``pufferfish_events_applied_total`` so it is scraped like the worker.

- ``bare``: ``async for`` over the stream of both input topics, nothing else;
- ``recipe``: the fastest known Faust pipeline with per-user state and no pufferfish logic
  (``take_events`` batches, per-batch dict, each touched user's state decoded from and written
  to the table's store once per batch, one changelog record per touched user via
  ``app.producer.send``);
- both on the worker's Faust app (stream_app/faust_adapter/app.py ``new_app``: its consumer,
  drain loop, transport and flow control), and as ``stock-bare`` / ``stock-recipe`` on stock Faust:
  ``MonitorlessApp``, i.e. faust.App with Faust's own consumer, ``_drain_messages``, transport
  and flow control. Both kinds share the rest: the worker's Faust settings (``app_options``),
  worker class (no spinner), event loop, logging, no Monitor sensor, frozen start-up heap and
  collector thresholds, so a stock pipeline differs from its twin by the consumer alone
  (including Faust's hard-coded 1.5 s idle-fetch wait, where ours reads
  ``consumer_fetch_max_wait_seconds``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

KINDS = ("bare", "recipe", "stock-bare", "stock-recipe")
STOCK_PREFIX = "stock-"


def command(kind: str) -> tuple[str, ...]:
    """The ``python`` arguments that run pipeline ``kind``."""
    if kind not in KINDS:
        raise ValueError(f"unknown Faust pipeline {kind!r} (one of {', '.join(KINDS)})")
    return ("-m", "bench.faust_pipelines", kind)


def build_app(kind: str, s: Any) -> Any:
    from stream_app.faust_adapter.app import MonitorlessApp, app_options, new_app

    options = dict(broker=s.broker, store="memory://", web_enabled=False, **app_options(s))
    app_id = f"{s.app_id}-{kind}"
    if kind.startswith(STOCK_PREFIX):
        return MonitorlessApp(app_id, **options)
    return new_app(s, app_id, **options)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in KINDS:
        print(f"usage: python -m bench.faust_pipelines {{{','.join(KINDS)}}}", file=sys.stderr)
        return 2
    return run(args[0])


def run(kind: str) -> int:
    import faust
    import orjson
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client import Counter as PromCounter

    from stream_app.faust_adapter.heap import freeze_startup_heap
    from stream_app.faust_adapter.ports_file import PortsFile
    from stream_app.faust_adapter.runner import new_event_loop, worker_class
    from stream_app.settings import Settings

    s = Settings()
    registry = CollectorRegistry()
    consumed = PromCounter("pufferfish_events_applied", "events", ["kind"], registry=registry)
    server, _thread = start_http_server(s.metrics_port or 0, addr="127.0.0.1", registry=registry)
    ports = PortsFile(s.ports_file)  # where the bench harness reads the port (0: the OS's)
    ports.start()
    ports.listening("metrics", server.server_port)
    app = build_app(kind, s)
    inputs = app.topic(s.topic_reports, s.topic_membership, key_type=bytes, value_type=bytes,
                       key_serializer="raw", value_serializer="raw",
                       partitions=s.input_partitions)
    table = app.Table("state", default=None, partitions=s.input_partitions,
                      schema=faust.Schema(key_serializer="json", value_serializer="raw"))
    counter = consumed.labels(kind="any")

    async def bare(stream: Any) -> None:
        logging.getLogger().setLevel(s.log_level.upper())
        async for _value in stream:
            counter.inc()

    async def recipe(stream: Any) -> None:
        """Per user: events seen and the last value, as JSON bytes (no pufferfish logic)."""
        logging.getLogger().setLevel(s.log_level.upper())
        store = table.data
        topic = table.changelog_topic.get_topic_name()
        producer = app.producer
        async for events in stream.take_events(s.batch_max_events, s.batch_within_seconds):
            touched: dict[bytes, tuple[dict[str, Any], int]] = {}
            for event in events:
                msg = event.message
                key = msg.key or b""
                doc = orjson.loads(msg.value or b"null")
                entry = touched.get(key)
                if entry is None:
                    raw = store.get(key.decode())
                    state = orjson.loads(raw) if raw is not None else {"n": 0}
                    entry = touched[key] = (state, msg.partition)
                entry[0]["n"] += 1
                entry[0]["last"] = doc
            for key, (state, partition) in touched.items():
                value = orjson.dumps(state)
                store[key.decode()] = value
                await producer.send(topic, orjson.dumps(key.decode()), value, partition,
                                    None, None)
            counter.inc(len(events))

    app.agent(inputs, name=kind.removeprefix(STOCK_PREFIX))(
        recipe if kind.endswith("recipe") else bare)
    # as the worker does once its app is built: the start-up heap frozen, the young
    # generation's threshold the worker's (GC_YOUNG_THRESHOLD)
    freeze_startup_heap()
    loop = new_event_loop(s)
    asyncio.set_event_loop(loop)
    worker = worker_class()(app, loglevel="WARNING", quiet=True, loop=loop,
                            redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
