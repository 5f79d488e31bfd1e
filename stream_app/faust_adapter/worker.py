"""The Faust worker: topics, tables, agents and timers of one worker process.

Flow: reports + membership (co-partitioned, key user_id) -> ``process`` (one agent, batches,
stream_app.domain.ingest) -> users table (changelog) + per-partition aggregates in memory -> every
``partials_interval`` the owner of each input partition publishes its Partial to
``topic_partials`` (1 partition) -> ``collect`` (on the single owner of that partition) keeps
the latest Partial per input partition -> the release timer on that worker (the public
clock, stream_app.release) publishes a learning round when one is due, then a noisy sum.

Delivery semantics (at-least-once; tansu has no transactions): reports are idempotent by
report_id within the user's last ``dedup_window`` ids; membership events set presence
absolutely, so replaying a suffix of the log ends in the same state; the two input topics are
not ordered with respect to each other; "latest value" is the report with the newest ``ts``.
A batch's records are acked (their offsets may be committed) only after the broker acknowledged
every changelog and dead-letter record the batch produced (input_agent.py, write_acks.py). A
record it did not acknowledge stops the worker (exit status 75) with the batch's records never
acked, so its offsets are not committed and a restart processes the batch again
(docs/design.md, "Delivery semantics").

Hot path (docs/design.md, "Throughput"): a batch of up to ``batch_max_events`` records; each
touched user is decoded once from the store, written once to the store (``users.data``: no
per-write Faust bookkeeping) and sent once to the table's changelog with ``app.producer.send``
on the user's input partition (the partition Faust itself would use); the batch's sends are
awaited together, before the batch is acked.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from stream_app.domain.admission import admission_for
from stream_app.domain.aggregate import PartitionAggregate
from stream_app.domain.ingest import Ingest
from stream_app.domain.models import Partial, to_bytes
from stream_app.domain.priors import checked_start
from stream_app.domain.rules import EventRules
from stream_app.faust_adapter.app import app_options, new_app
from stream_app.faust_adapter.heap import freeze_startup_heap
from stream_app.faust_adapter.input_agent import InputAgent
from stream_app.faust_adapter.user_table import UserTable
from stream_app.faust_adapter.write_acks import WriteNotAcknowledged
from stream_app.kafka.clients import faust_credentials
from stream_app.metrics import Metrics
from stream_app.release import Releaser
from stream_app.release.partials_log import supersedes
from stream_app.release.schedule import run_clock
from stream_app.settings import Settings

log = logging.getLogger(__name__)


CHECKPOINT_WAIT_SECONDS = 5.0  # for the last writes' acknowledgements at a stop


def partials_interval(settings: Settings) -> float:
    return min(0.1, settings.release_period_seconds / 10)


def table_dir(settings: Settings) -> Path:
    """Where a RocksDB store keeps the tables: one directory per app and host under data_dir,
    so that replicas sharing a volume (docker-compose.yml) never open each other's databases
    nor an app another's; a StatefulSet pod keeps its name, hence its directory, across
    restarts."""
    # absolute: Faust reads a relative tabledir as relative to its versioned datadir
    path = (settings.data_dir / "tables" / settings.app_id / socket.gethostname()).absolute()
    path.mkdir(parents=True, exist_ok=True)  # (Faust makes only its last part)
    return path


def held_sweep_interval(settings: Settings) -> float:
    """How often held reports are checked for an expired grace (a few times per grace)."""
    return min(5.0, max(0.2, settings.join_grace_seconds / 4))


class PufferfishApp:
    """Builds and wires the Faust app for one worker process."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = s = settings
        self.metrics = metrics or Metrics.create()
        self.priors, plan = checked_start(s)  # bad priors/pairs fail here, before any I/O
        self.rules = EventRules(
            domain=s.domain, grid_log2=s.grid_log2, dedup_window=s.dedup_window,
            auto_join=s.auto_join, known_groups=self.priors.groups,
            default_group=self.priors.default_group,
            admission=admission_for(s.release_mechanism, s.max_changes_per_window,
                                    s.budget_window_seconds, s.release_period_seconds),
        )
        self.app = app = new_app(
            s, s.app_id, broker=s.broker, broker_credentials=faust_credentials(s), store=s.store,
            datadir=str(s.data_dir), tabledir=str(table_dir(s)),
            web_enabled=s.web_port is not None, web_bind=s.web_host,
            web_port=s.web_port or 6066, web_host=s.web_host, **app_options(s),
        )
        raw: dict[str, Any] = dict(
            key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )
        # one topic for both kinds is allowed (then Kafka orders a user's records itself)
        self.inputs = app.topic(*dict.fromkeys((s.topic_reports, s.topic_membership)),
                                partitions=s.input_partitions, **raw)
        self.partials_topic = app.topic(s.topic_partials, partitions=1, **raw)
        self.deadletter_topic = app.topic(s.topic_deadletter, partitions=1, **raw)
        json_schema: Any = faust.Schema(key_serializer="json", value_serializer="json")
        # Values are UserState.to_bytes() (JSON text, the same on the wire as before): the
        # store keeps one bytes object per user, recovery stores the changelog's bytes as is.
        users_schema: Any = faust.Schema(key_serializer="json", value_serializer="raw")
        self.users = app.Table("users", default=None, partitions=s.input_partitions,
                               schema=users_schema)
        self.table = UserTable(self.users)
        self.table.assigned = self._input_partitions
        self.ingest = Ingest(s, self.rules, self.metrics, self.table)
        self.input = InputAgent(s, self.ingest, self.table, app, self.deadletter_topic,
                                self.metrics)
        self.partials = app.Table("partials", default=None, partitions=1, schema=json_schema)
        self.releaser = Releaser(s, self.metrics, self.priors, self.latest_partials,
                                 self.owns_release, plan=plan)
        self.metrics.reports_held_limit.labels(scope="user").set(s.max_held_reports_per_user)

        app.agent(self.inputs, name="process")(self.input.process)
        app.agent(self.partials_topic, name="collect")(self._collect)
        app.timer(partials_interval(s), name="publish_partials")(self._publish_partials)
        app.task(self._run_clock)  # the public clock (stream_app/release/schedule.py)
        app.timer(held_sweep_interval(s), name="expire_held")(self._expire_held)
        app.on_partitions_revoked.connect(self._on_rebalance)  # type: ignore[arg-type]
        app.on_partitions_assigned.connect(self._on_rebalance)  # type: ignore[arg-type]
        app.on_before_shutdown.connect(self._on_shutdown)  # type: ignore[arg-type]
        # the modules and the app are built: they live as long as the process
        freeze_startup_heap()

    # --- ownership and rebalancing -------------------------------------------------------
    def _assigned(self) -> set[TP]:
        try:
            return set(self.app.assignor.assigned_actives())
        except Exception:  # noqa: BLE001 - no assignment yet
            return set()

    def _ready(self) -> bool:
        """Tables recovered and no rebalance or recovery running (then the state is whole)."""
        recovery = self.app.tables.recovery  # type: ignore[attr-defined]
        busy = self.app.rebalancing or getattr(self.app, "in_recovery", False)
        return bool(recovery.completed.is_set()) and not busy

    def owns_release(self) -> bool:
        return self._ready() and TP(self.settings.topic_partials, 0) in self._assigned()

    @property
    def write_failure(self) -> WriteNotAcknowledged | None:
        """Set when a batch's record was not acknowledged (the runner then exits 75)."""
        return self.input.write_failure

    @property
    def aggregates(self) -> dict[int, PartitionAggregate]:
        return self.table.aggregates

    def _input_partitions(self) -> list[int]:
        return [tp.partition for tp in self._assigned() if tp.topic == self.settings.topic_reports]

    async def _on_rebalance(self, app: Any, tps: set[TP], **kwargs: Any) -> None:
        self.table.invalidate()
        self.releaser.invalidate()

    async def _on_shutdown(self, app: Any, **kwargs: Any) -> None:
        await self.releaser.stop()
        await self._checkpoint()

    async def _checkpoint(self) -> None:
        """RocksDB: the aggregates are kept for the next start once every write is
        acknowledged (user_table.py); a failure only costs that start a rebuild."""
        if not self.table.persistent:
            return
        try:
            await asyncio.wait_for(self.input.flushed(), CHECKPOINT_WAIT_SECONDS)
            kept = self.table.checkpoint()
        except Exception as exc:  # noqa: BLE001
            log.warning("aggregates not kept for the next start (%s)", type(exc).__name__)
        else:
            if kept:
                log.info("aggregates of partitions %s kept for the next start", kept)

    async def _expire_held(self) -> None:
        if self._ready():
            self.input.expire_held(self.table.begin(self._input_partitions()))

    # --- partials and ticks ---------------------------------------------------------------
    async def _publish_partials(self) -> None:
        if not self._ready():
            return
        admission = self.rules.admission
        window = admission.window_at(time.time()) if admission is not None else None
        pending = self.input.pending() if window is not None else set()
        for partition in self.table.begin(self._input_partitions()):
            agg = self.aggregates.get(partition)  # (gone if a rebalance came meanwhile)
            if agg is None:
                continue
            if window is not None:  # on the clock: a partition without records rolls too,
                agg.roll(window, settled=partition not in pending)  # nothing pending: durable
            if not agg.dirty:
                continue
            try:
                tree = {} if window is None else agg.partial_fields(partition in pending)
                if tree is None:
                    continue  # tree mode, nothing acknowledged yet
                sum_units, group_units, newest_ts, consumed_at = agg.snapshot()
                partial = Partial(partition=partition, sum_units=tree.pop("sum_units", sum_units)
                                  or 0, group_units=group_units,
                                  group_totals=agg.group_totals, newest_ts=newest_ts,
                                  consumed_at=consumed_at, **tree)
                await self.partials_topic.send(key=b"partial", value=to_bytes(partial))
            except Exception as exc:  # noqa: BLE001
                agg.dirty = True  # sent again next tick
                self.metrics.broker_errors.inc()
                log.error("partial not sent (%s)", type(exc).__name__)

    async def _collect(self, stream: Any) -> None:
        async for event in stream.events():
            try:
                partial = Partial.model_validate_json(event.message.value or b"")
            except ValueError:
                log.warning("ignoring a malformed partial")
                continue
            msg = event.message
            key = str(partial.partition)
            held = self.partials.get(key)
            if not supersedes(held.get("offset") if held else None, msg.offset,
                              self._log_end(msg.topic, msg.partition)):
                continue  # read again after its successor (release/partials_log.py)
            self.partials[key] = {**partial.model_dump(), "offset": msg.offset}

    def _log_end(self, topic: str, partition: int) -> int | None:
        try:
            end = self.app.consumer.highwater(TP(topic, partition))
        except Exception:  # noqa: BLE001 - not known (yet): treated as a log not reset
            return None
        return end if isinstance(end, int) else None

    def latest_partials(self) -> dict[int, Partial]:
        return {int(k): Partial.model_validate(v) for k, v in self.partials.items()
                if v is not None}

    async def _run_clock(self) -> None:
        await run_clock(self.releaser, self.owns_release)
