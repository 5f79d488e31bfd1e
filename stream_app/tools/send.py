"""``pufferfish send [--config FILE] [--timeout S] [--progress] [FILE|-]``: JSONL in, records out.

Each line is a report or a membership event (stream_app.tools.lines); the record goes to
``topic_reports`` or ``topic_membership`` with key = ``user_id`` and, explicitly, partition =
murmur2(key) mod the topic's partition count read from the broker (the partitioning contract,
docs/design.md). A user's records keep the file's order across the two topics: a record waits
until the same user's records already sent to the other topic are acknowledged
(``UserOrder.after_other_topic``: the worker hands a record over after every record of the
partner partition acknowledged before it was produced), and is stamped no earlier than them
(``UserOrder.stamp``). The client is the worker's: same settings, bootstrap, SASL/TLS options.

Output: a bad line is one line on stderr (its number and why) and is skipped; at the end ONE
JSON summary on stdout of what the broker acknowledged, per topic and partition. A progress bar
goes to stderr when it is a terminal (or with --progress). Exit status: 0 every line was
acknowledged; 1 some lines were skipped (the rest acknowledged); 2 nothing could be sent (bad
arguments or settings, broker unreachable within --timeout, missing topic) or some records were
not acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any, BinaryIO

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from tqdm import tqdm

from pufferfish_core.errors import PufferfishInputError
from stream_app.kafka.clients import aiokafka_kwargs
from stream_app.kafka.partitioning import partition_for
from stream_app.settings import Settings, arguments, load_settings
from stream_app.tools import common
from stream_app.tools.lines import MEMBERSHIP, REPORTS, LineError, parse_line
from stream_app.tools.user_order import UserOrder


class LineReader:
    """The input's lines, read by a daemon thread (a read blocked on stdin never holds up the
    event loop or the exit); at most ``depth`` lines wait in memory."""

    def __init__(self, stream: BinaryIO, depth: int = 4096) -> None:
        self._stream = stream
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self._slots = threading.Semaphore(depth)
        threading.Thread(target=self._read, name="send-input", daemon=True).start()

    def _put(self, item: bytes | BaseException | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the command is ending
            pass

    def _read(self) -> None:
        try:
            for line in self._stream:
                self._slots.acquire()
                self._put(line)
            self._put(None)
        except BaseException as exc:  # noqa: BLE001 - handed over to the event loop
            self._put(exc)

    async def lines(self) -> AsyncIterator[bytes]:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise PufferfishInputError("input", f"cannot read: {item}")
            self._slots.release()
            yield item


class Run:
    """One ``send``: what was read, skipped, acknowledged (per topic and partition), failed."""

    def __init__(self, settings: Settings, timeout: float, bar: tqdm[Any]) -> None:
        self.settings, self.timeout, self.bar = settings, timeout, bar
        self.topics = {REPORTS: settings.topic_reports, MEMBERSHIP: settings.topic_membership}
        self.partitions: dict[str, int] = {}
        self.lines = self.skipped = self.failed = self.pending = 0
        self.reasons: Counter[str] = Counter()
        self.acked: dict[str, Counter[int]] = {t: Counter() for t in self.topics.values()}
        self.first_failure = ""
        self.started = False  # the producer started: a summary is due
        self.progress_at = time.monotonic()
        self.order = UserOrder(settings, timeout)

    def say(self, message: str) -> None:
        tqdm.write(message, file=sys.stderr)

    def skip(self, lineno: int, exc: LineError) -> None:
        self.skipped += 1
        self.reasons[exc.reason] += 1
        self.say(f"pufferfish: error: line {lineno}: {exc.reason}: {exc} (skipped)")

    def _done(self, fut: asyncio.Future[Any]) -> None:
        self.pending -= 1
        self.progress_at = time.monotonic()
        if fut.cancelled() or fut.exception() is not None:
            self.failed += 1
            if not self.first_failure:
                exc = fut.exception() if not fut.cancelled() else None
                self.first_failure = f"{type(exc).__name__}: {exc}" if exc else "cancelled"
            return
        meta = fut.result()
        self.acked[meta.topic][meta.partition] += 1
        self.bar.update(1)

    async def send_all(self, producer: AIOKafkaProducer, reader: LineReader) -> None:
        lineno = 0
        async for raw in reader.lines():
            lineno += 1
            try:
                record = parse_line(raw, self.settings.max_payload_bytes, self.topics)
            except LineError as exc:
                self.lines += 1
                self.skip(lineno, exc)
                continue
            if record is None:
                continue
            self.lines += 1
            topic = self.topics[record.kind]
            partition = partition_for(record.key, self.partitions[topic])
            await self.order.after_other_topic(record.key, topic)
            try:
                async with asyncio.timeout(self.timeout):
                    fut = await producer.send(topic, record.value, key=record.key,
                                              partition=partition,
                                              timestamp_ms=self.order.stamp(topic))
            except TimeoutError:
                raise common.broker_error(self.settings, f"no answer in {self.timeout:g} s from",
                                          "send") from None
            except KafkaError as exc:
                raise common.broker_error(self.settings, f"{type(exc).__name__} ({exc}) from",
                                          "send") from None
            self.pending += 1
            fut.add_done_callback(self._done)
            self.order.track(record.key, topic, fut)
        await self.settle()

    async def settle(self) -> None:
        """Wait for every acknowledgement while they keep coming (a stall of --timeout fails)."""
        while self.pending:
            if time.monotonic() - self.progress_at > self.timeout:
                self.failed += self.pending
                raise common.broker_error(self.settings, f"{self.pending} records not "
                                          f"acknowledged: no answer in {self.timeout:g} s from")
            await asyncio.sleep(0.02)

    async def run(self, stream: BinaryIO) -> None:
        kwargs = aiokafka_kwargs(self.settings)
        counts = await common.partition_counts(kwargs, self.settings, self.timeout)
        for kind, topic in self.topics.items():
            if topic not in counts:
                raise PufferfishInputError(f"topic_{kind}", f"topic {topic!r} does not exist on "
                                           "the broker (`pufferfish run` creates it)")
            self.partitions[topic] = counts[topic]
        producer = AIOKafkaProducer(
            **kwargs, acks="all", request_timeout_ms=int(self.timeout * 1000),
            max_batch_size=self.settings.producer_max_batch_size,
            linger_ms=int(self.settings.producer_linger_seconds * 1000),
        )
        try:
            await common.bounded(producer.start(), self.timeout, self.settings, common.CONNECT)
            self.started = True
            await self.send_all(producer, LineReader(stream))
        finally:
            await common.quietly(producer.stop(), self.timeout)

    def summary(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "acknowledged": sum(sum(c.values()) for c in self.acked.values()),
            "skipped": self.skipped,
            "failed": self.failed,
            "skipped_reasons": dict(sorted(self.reasons.items())),
            "topics": {t: {"partitions": self.partitions.get(t),
                           "acknowledged": {str(p): n for p, n in sorted(c.items())}}
                       for t, c in self.acked.items()},
        }


def _open(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # noqa: SIM115 - read by the reader thread until the exit
    except OSError as exc:
        raise PufferfishInputError("input", f"cannot read {path!r}: {exc.strerror}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments.CommandParser(
        "pufferfish send",
        "Send reports and membership events (JSONL, one per line) to the input topics: key "
        "user_id, partition murmur2(key) mod the topic's partitions.",
        epilog="stdout: one JSON summary of what the broker acknowledged. Exit status: 0 all "
        "acknowledged, 1 some lines skipped (each named on stderr), 2 error.")
    parser.add_argument("input", nargs="?", default="-", metavar="FILE|-",
                        help="JSONL file of reports and membership events, - for stdin")
    arguments.add_config(parser)
    arguments.add_broker(parser)
    arguments.add_timeout(parser, common.DEFAULT_TIMEOUT, "at each step")
    parser.add_argument("--progress", action="store_true",
                        help="progress bar on stderr even when it is not a terminal")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        settings = load_settings(args.config, {"broker": args.broker} if args.broker else {})
        stream = _open(args.input)
    except PufferfishInputError as exc:
        return common.fail(exc)
    common.quiet_kafka_logs()
    bar = tqdm(desc="acknowledged", unit=" records", file=sys.stderr, mininterval=0.25,
               disable=not (args.progress or sys.stderr.isatty()))
    run = Run(settings, args.timeout, bar)
    error: PufferfishInputError | None = None
    try:
        asyncio.run(run.run(stream))
    except PufferfishInputError as exc:
        error = exc
    finally:
        bar.close()
    if run.started:
        print(json.dumps(run.summary()), flush=True)
    if error is not None:
        return common.fail(error)
    if run.failed:
        return common.fail(common.broker_error(
            settings, f"{run.failed} records not acknowledged ({run.first_failure}) by"))
    return common.EXIT_PARTIAL if run.skipped else common.EXIT_OK
