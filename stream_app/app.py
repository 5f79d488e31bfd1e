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
- "latest value" is the report with the newest ``ts`` (ties: the later one);
- input is handled in batches (``take_events``: up to BATCH_MAX_EVENTS records or what came
  within BATCH_WITHIN_SECONDS). Each user's records are applied in order with the same rules
  and dead-letter reasons as one at a time; each touched user is recalibrated and written to
  the table once per batch. A batch's records are acked (so their offsets may be committed)
  only after its table writes and dead-letter sends were issued, and Faust flushes the
  producer before it commits offsets.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import faust
from faust.streams import _current_event
from faust.types import TP

from core.errors import PufferfishInputError
from stream_app.calibration import UserCalibrator, load_priors
from stream_app.metrics import EVENT_KINDS, REJECT_REASONS, Metrics
from stream_app.models import (
    Membership,
    Partial,
    Rejected,
    Report,
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

# Input records are applied in batches of at most this many, or what arrived within this time.
# Faust fills the batch only while the agent waits, so the wait bounds the batch under load:
# measured (200 users, K=5, exact) 0.05 s -> ~600/s, 0.1 s -> ~750/s, 0.2 s -> ~1,150/s.
# Under light load a record waits at most this long before it is applied.
BATCH_MAX_EVENTS = 1000
BATCH_WITHIN_SECONDS = 0.2


class _Message(NamedTuple):
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None


class _Record:
    """A stand-in for a Faust event (``handle`` on one record, tests)."""

    def __init__(self, topic: str, partition: int, key: bytes | None, value: bytes | None):
        self.message = _Message(topic, partition, key, value)


@dataclass
class _Step:
    index: int  # position in the batch
    event: Any
    item: Report | Membership


@dataclass
class _Touched:
    """One user's records in a batch: the state before it and the working state."""

    old: UserState | None
    state: UserState | None
    steps: list[_Step] = field(default_factory=list)


def _ref(event: Any) -> Any:
    # Faust's table picks the changelog partition (and the store its partition) from the
    # current event, a context variable; in a batch we set it to the record being written.
    return weakref.ref(event)


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
        m = self.metrics
        self._consumed = {k: m.events_consumed.labels(kind=k) for k in EVENT_KINDS}
        self._rejected = {r: m.events_rejected.labels(reason=r) for r in REJECT_REASONS}

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
        # take_events acks a batch's events (so their offsets may be committed) only when we
        # ask for the next batch, i.e. after handle_batch has put their effects in the table.
        async for events in stream.take_events(BATCH_MAX_EVENTS, BATCH_WITHIN_SECONDS):
            letters = self.handle_batch(events)
            if letters:
                await self._send_dead_letters(letters)

    async def _send_dead_letters(self, letters: Sequence[tuple[str, bytes | None, str]]) -> None:
        now = time.time()
        sends = [
            self.deadletter_topic.send(value=to_bytes(dead_letter(topic, raw, reason, now)))
            for topic, raw, reason in letters
        ]
        for result in await asyncio.gather(*sends, return_exceptions=True):
            if isinstance(result, BaseException):
                self.metrics.broker_errors.inc()
                log.error("dead letter not sent (%s)", type(result).__name__)

    def handle(
        self, topic: str, partition: int, key: bytes | None, raw: bytes | None
    ) -> str | None:
        """Apply one input record; return the dead-letter reason or None when accepted."""
        letters = self.handle_batch([_Record(topic, partition, key, raw)])
        return letters[0][2] if letters else None

    def handle_batch(self, events: Sequence[Any]) -> list[tuple[str, bytes | None, str]]:
        """Apply a batch of input events (objects with ``.message``) in order.

        Returns the dead letters ``(source_topic, raw, reason)`` in record order. The outcome
        is the one of applying the records one at a time (``_replay`` is exactly that): each
        user's records are applied in order to a working copy of the user's state; each
        touched user is recalibrated once, at the end, and written to the table once. If
        core refuses the final state, or the user's records came on several partitions, the
        user's records are replayed one at a time with a recalibration after each.
        """
        reasons: list[str | None] = [None] * len(events)
        kinds: list[str] = [""] * len(events)
        touched: dict[str, _Touched] = {}
        token = _current_event.set(None)
        try:
            for i, event in enumerate(events):
                reasons[i] = self._stage(i, event, touched, kinds)
            for user_id, t in touched.items():
                self._commit(user_id, t, reasons)
        finally:
            _current_event.reset(token)
        consumed: Counter[str] = Counter()
        rejected: Counter[str] = Counter()
        letters = []
        for i, event in enumerate(events):
            reason = reasons[i]
            if reason is None:
                consumed[kinds[i]] += 1
            else:
                rejected[reason] += 1
                msg = event.message
                letters.append((msg.topic, msg.value, reason))
        for kind, n in consumed.items():
            self._consumed[kind].inc(n)
        for reason, n in rejected.items():
            self._rejected[reason].inc(n)
        return letters

    def _stage(
        self, i: int, event: Any, touched: dict[str, _Touched], kinds: list[str]
    ) -> str | None:
        """Classify record i and apply it to its user's working state; the reason or None."""
        s = self.settings
        msg = event.message
        _current_event.set(_ref(event))
        try:
            self.aggregate(msg.partition)
            if msg.topic == s.topic_reports:
                item: Report | Membership = parse_report(msg.value, s.max_payload_bytes)
                kinds[i] = "report"
            else:
                item = parse_membership(msg.value, s.max_payload_bytes)
                kinds[i] = "membership"
            check_key(msg.key, item.user_id)
            t = touched.get(item.user_id)
            if t is None:
                old = self._get(item.user_id)
                t = touched[item.user_id] = _Touched(old=old, state=old)
            t.steps.append(_Step(i, event, item))
            t.state = self._apply(t.state, item, msg.partition)
        except Rejected as rej:
            return rej.reason
        except Exception as exc:  # noqa: BLE001 - one bad record must not stop the worker
            # only the type: an exception message could quote the record
            log.error("record could not be processed (%s); dead-lettered", type(exc).__name__)
            return "invalid_schema"
        return None

    def _apply(
        self, state: UserState | None, item: Report | Membership, partition: int
    ) -> UserState:
        if isinstance(item, Report):
            return apply_report(state, item, partition, self.rules)
        return apply_membership(state, item, partition, self.rules)

    def _commit(self, user_id: str, t: _Touched, reasons: list[str | None]) -> None:
        """Recalibrate one touched user once and write it (or replay its records one by one)."""
        if all(reasons[step.index] is not None for step in t.steps):
            return
        partitions = {step.event.message.partition for step in t.steps}
        if len(partitions) != 1 or t.state is None:
            self._replay(user_id, t, reasons)
            return
        agg = self.aggregate(partitions.pop())
        started = time.perf_counter()
        try:
            new = recalibrated(t.state, self.calibrate)
        except Exception:  # noqa: BLE001 - _replay attributes the refusal to one record
            self._replay(user_id, t, reasons)
            return
        agg.apply(user_id, t.old, new)
        self.metrics.recalibration_seconds.observe(time.perf_counter() - started)
        last = t.steps[-1].event
        _current_event.set(_ref(last))
        self.users[user_id] = new.to_json()
        for step in t.steps:
            if reasons[step.index] is None:
                agg.note_event(step.item.ts)

    def _replay(self, user_id: str, t: _Touched, reasons: list[str | None]) -> None:
        """The per-record path: apply, recalibrate and write after each record in turn."""
        state = t.old
        for step in t.steps:
            msg = step.event.message
            _current_event.set(_ref(step.event))
            try:
                agg = self.aggregate(msg.partition)
                new = self._apply(state, step.item, msg.partition)
                with self.metrics.recalibration_seconds.time():
                    new = recalibrated(new, self.calibrate)
                    agg.apply(user_id, state, new)
            except Rejected as rej:
                reasons[step.index] = rej.reason
                continue
            except PufferfishInputError as exc:
                # core refused the user's statistics: keep the old state, never the values in logs
                log.warning("calibration refused a record (field %s)", exc.field)
                reasons[step.index] = "invalid_schema"
                continue
            except Exception as exc:  # noqa: BLE001
                log.error("record could not be processed (%s); dead-lettered", type(exc).__name__)
                reasons[step.index] = "invalid_schema"
                continue
            self.users[user_id] = new.to_json()
            agg.note_event(step.item.ts)
            reasons[step.index] = None
            state = new

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
