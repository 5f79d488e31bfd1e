"""The Faust application: one agent over both input topics, user table, partials, release timer.

Flow: reports + membership (co-partitioned, key user_id) -> ``process`` (one agent, so a
user's events are serialised) -> users table (changelog) + per-partition aggregates in memory
-> every ``partials_interval`` the owner of each input partition publishes its Partial to
``topic_partials`` (1 partition) -> ``collect`` (runs on the single owner of that partition)
keeps the latest Partial per input partition in a changelog table -> the release timer on
that same worker combines them and publishes a noisy release (stream_app.release).

Delivery semantics (at-least-once; tansu has no transactions):
- reports are idempotent by report_id within the user's last ``dedup_window`` accepted ids;
  a redelivery older than that window would be counted again (replays after a crash are a
  few seconds of input, far shorter than the default window of 256 reports per user);
- a membership event sets the state absolutely (present/absent), so replaying a suffix of
  the log ends in the same state; replays show up as already_present/unknown_user letters;
- the two input topics are not ordered with respect to each other: a report and a join sent
  at the same moment may be handled in either order (the report is then ``not_present``);
- "latest value" is the report with the newest ``ts`` (ties: the later one).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import faust
from faust.types import TP

from core.errors import PufferfishInputError
from stream_app.calibration import UserCalibrator, load_priors
from stream_app.metrics import Metrics
from stream_app.models import (
    Partial,
    Rejected,
    check_key,
    dead_letter,
    parse_membership,
    parse_report,
    to_bytes,
)
from stream_app.release import Releaser
from stream_app.settings import Settings
from stream_app.state import (
    PartitionAggregate,
    Rules,
    UserState,
    apply_membership,
    apply_report,
    recalibrated,
)

log = logging.getLogger(__name__)


def partials_interval(settings: Settings) -> float:
    return min(0.25, settings.release_period_seconds / 4)


def build_rules(settings: Settings, known_groups: frozenset[str] | None) -> Rules:
    return Rules(
        domain=settings.domain,
        grid_log2=settings.grid_log2,
        dedup_window=settings.dedup_window,
        auto_join=settings.auto_join,
        known_groups=known_groups,
        group_required=settings.prior_source == "declared",
    )


class PufferfishApp:
    """Builds and wires the Faust app for one worker process."""

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = s = settings
        self.metrics = metrics or Metrics.create()
        references = load_priors(s.priors_file) if s.priors_file is not None else {}
        self.calibrate = UserCalibrator(s, references)
        self.rules = build_rules(s, frozenset(references) if references else None)
        self._check_calibration()
        self.aggregates: dict[int, PartitionAggregate] = {}

        self.app = faust.App(
            s.app_id,
            broker=s.broker,
            broker_credentials=s.faust_credentials(),
            store=s.store,
            datadir=str(s.data_dir),
            autodiscover=False,
            processing_guarantee="at_least_once",
            topic_partitions=s.input_partitions,
            topic_replication_factor=1,
            table_standby_replicas=0,
            consumer_auto_offset_reset="earliest",
            producer_max_batch_size=s.producer_max_batch_size,
            broker_session_timeout=s.broker_session_timeout,
            broker_rebalance_timeout=s.broker_rebalance_timeout,
            broker_heartbeat_interval=s.broker_heartbeat_interval,
            web_enabled=s.web_port is not None,
            web_bind=s.web_host,
            web_port=s.web_port or 6066,
            web_host=s.web_host,
        )
        app = self.app
        self.inputs = app.topic(
            s.topic_reports, s.topic_membership,
            key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw",
            partitions=s.input_partitions,
        )
        self.partials_topic = app.topic(
            s.topic_partials, key_type=bytes, value_type=bytes,
            key_serializer="raw", value_serializer="raw", partitions=1,
        )
        self.deadletter_topic = app.topic(
            s.topic_deadletter, key_type=bytes, value_type=bytes,
            key_serializer="raw", value_serializer="raw", partitions=1,
        )
        json_schema: Any = faust.Schema(key_serializer="json", value_serializer="json")
        self.users = app.Table(
            "users", default=None, partitions=s.input_partitions, schema=json_schema,
        )
        self.partials = app.Table("partials", default=None, partitions=1, schema=json_schema)
        self.releaser = Releaser(s, self.metrics, self.latest_partials, self.owns_release)

        app.agent(self.inputs, name="process")(self._process)
        app.agent(self.partials_topic, name="collect")(self._collect)
        app.timer(partials_interval(s), name="publish_partials")(self._publish_partials)
        app.timer(s.release_period_seconds, name="release")(self._release_tick)
        app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]
        app.on_partitions_assigned.connect(self._on_assigned)  # type: ignore[arg-type]
        app.on_before_shutdown.connect(self._on_shutdown)  # type: ignore[arg-type]

    def _check_calibration(self) -> None:
        """Fail at start-up, not on the first event, if core rejects the configured rule/pairs."""
        counts = (1,) + (0,) * (len(self.settings.domain) - 1)
        probe = UserState(partition=0, present=True, counts=counts)
        if self.settings.prior_source == "declared":
            probe = UserState(partition=0, present=True, group=None)
        try:
            self.calibrate(probe)
        except PufferfishInputError:
            raise
        except ValueError as exc:
            raise PufferfishInputError("rule", str(exc)) from None

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

    async def _on_revoked(self, app: Any, revoked: set[TP], **kwargs: Any) -> None:
        self.aggregates.clear()
        self.releaser.invalidate()

    async def _on_shutdown(self, app: Any, **kwargs: Any) -> None:
        await self.releaser.stop()

    async def _on_assigned(self, app: Any, assigned: set[TP], **kwargs: Any) -> None:
        self.aggregates.clear()
        self.releaser.invalidate()

    # --- input agent ----------------------------------------------------------------------
    def aggregate(self, partition: int) -> PartitionAggregate:
        agg = self.aggregates.get(partition)
        if agg is None:
            users = [
                (k, UserState.from_json(v)) for k, v in self.users.items() if v is not None
            ]
            agg = PartitionAggregate.rebuild(partition, users)
            self.aggregates[partition] = agg
        return agg

    async def _process(self, stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            try:
                reason = self.handle(msg.topic, msg.partition, msg.key, msg.value)
            except Exception as exc:  # noqa: BLE001 - one bad record must not stop the worker
                # only the type: an exception message could quote the record
                log.error("record could not be processed (%s); dead-lettered", type(exc).__name__)
                self.metrics.events_rejected.labels(reason="invalid_schema").inc()
                reason = "invalid_schema"
            if reason is not None:
                dl = dead_letter(msg.topic, msg.value, reason, time.time())
                try:
                    await self.deadletter_topic.send(value=to_bytes(dl))
                except Exception as exc:  # noqa: BLE001
                    self.metrics.broker_errors.inc()
                    log.error("dead letter not sent (%s)", type(exc).__name__)

    def handle(
        self, topic: str, partition: int, key: bytes | None, raw: bytes | None
    ) -> str | None:
        """Apply one input record; return the dead-letter reason or None when accepted."""
        s = self.settings
        try:
            agg = self.aggregate(partition)
            if topic == s.topic_reports:
                report = parse_report(raw, s.max_payload_bytes)
                check_key(key, report.user_id)
                user_id, ts, kind = report.user_id, report.ts, "report"
                old = self._get(user_id)
                new = apply_report(old, report, partition, self.rules)
            else:
                change = parse_membership(raw, s.max_payload_bytes)
                check_key(key, change.user_id)
                user_id, ts, kind = change.user_id, change.ts, change.event
                old = self._get(user_id)
                new = apply_membership(old, change, partition, self.rules)
            with self.metrics.recalibration_seconds.time():
                new = recalibrated(new, self.calibrate)
                agg.apply(user_id, old, new)
        except Rejected as rej:
            self.metrics.events_rejected.labels(reason=rej.reason).inc()
            return rej.reason
        except PufferfishInputError as exc:
            # core refused the user's statistics: keep the old state, never the values in logs
            log.warning("calibration refused a record (field %s)", exc.field)
            self.metrics.events_rejected.labels(reason="invalid_schema").inc()
            return "invalid_schema"
        self.users[user_id] = new.to_json()
        agg.note_event(ts)
        self.metrics.events_consumed.labels(kind=kind).inc()
        return None

    def _get(self, user_id: str) -> UserState | None:
        raw = self.users.get(user_id)
        return UserState.from_json(raw) if raw is not None else None

    # --- partials -------------------------------------------------------------------------
    async def _publish_partials(self) -> None:
        if not self._ready():
            return
        for tp in sorted(self._assigned()):
            if tp.topic != self.settings.topic_reports:
                continue
            try:
                agg = self.aggregate(tp.partition)
                if not agg.dirty:
                    continue
                partial = Partial(
                    partition=tp.partition, sum_units=agg.sum_units, theta=agg.theta,
                    spread=agg.spread, binding_pair=agg.binding_pair, newest_ts=agg.newest_ts,
                    new_events=agg.new_events,
                )
                agg.dirty, agg.new_events = False, 0
                await self.partials_topic.send(key=b"partial", value=to_bytes(partial))
            except Exception as exc:  # noqa: BLE001
                self.aggregates.pop(tp.partition, None)  # rebuilt (and re-sent) next tick
                self.metrics.broker_errors.inc()
                log.error("partial not sent (%s)", type(exc).__name__)

    async def _collect(self, stream: Any) -> None:
        async for event in stream.events():
            try:
                partial = Partial.model_validate_json(event.message.value or b"")
            except ValueError:
                log.warning("ignoring a malformed partial")
                continue
            self.partials[str(partial.partition)] = partial.model_dump()
            try:
                await self.releaser.count_events(partial.new_events)
            except Exception as exc:  # noqa: BLE001
                self.metrics.broker_errors.inc()
                log.error("early release failed (%s)", type(exc).__name__)

    def latest_partials(self) -> dict[int, Partial]:
        out: dict[int, Partial] = {}
        for key, value in self.partials.items():
            if value is not None:
                out[int(key)] = Partial.model_validate(value)
        return out

    async def _release_tick(self) -> None:
        try:
            await self.releaser.release_once()
        except Exception as exc:  # noqa: BLE001 - retry on the next tick
            self.metrics.broker_errors.inc()
            log.error("release tick failed (%s: %s)", type(exc).__name__, exc)
