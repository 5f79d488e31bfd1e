"""``pufferfish tail``: follow the ``releases``, ``priors`` (default) or ``deadletter`` topics.

``pufferfish tail [--config FILE] [--json] [--from-beginning] [--topics releases,priors] [--max
N] [--timeout S]``; ``--topics`` also takes ``deadletter``. Human lines by default (``release
seq=… tick=… theta=… noisy_sum=… ± ci95_half_width noise_sd=… charge=… epsilon_spent=spent/total
… [learning_rounds=… failure_probability=…] [mechanism=tree window_tick=… nodes=… arity=…
max_changes_per_window=…]``, the ± part only for records that carry it, then with
release_by_group one indented line a group: ``group=… noisy_sum=… ± … noise_sd=… noisy_count=… ±
… count_noise_sd=…``; ``priors seq=… tick=… group=… status=… radius=… law={…}``, ``deadletter
reason=… source_topic=… partition=… offset=… detail="…"``: never the record's bytes), or each
record's JSON as published with --json (a dead letter's ``raw``: null unless the worker runs
with deadletter_include_raw). Starts at the end (new records only) unless --from-beginning;
stops after --max records; Ctrl-C ends it quietly (exit 0). Topics that do not exist yet are
waited for. A broker that does not answer within --timeout: one line ``pufferfish: error:
broker: ...``, exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import sys
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from pydantic import ValidationError

from pufferfish_core.errors import PufferfishInputError
from stream_app.domain.models import DeadLetter, PriorsRecord, Release
from stream_app.kafka.clients import aiokafka_kwargs, consumer_kwargs
from stream_app.settings import Settings, arguments, load_settings
from stream_app.tools import common

KINDS = ("releases", "priors", "deadletter")
DEFAULT_KINDS = ("releases", "priors")
WAIT_NOTE_SECONDS = 1.0  # metadata re-check while a topic does not exist yet


def release_line(r: Release) -> str:
    total = r.epsilon_spent + r.epsilon_remaining
    window = "" if r.window is None else f" window={r.window}"
    bar = "" if r.ci95_half_width is None else f" ± {r.ci95_half_width:.4g}"
    sd = "" if r.noise_sd is None else f" noise_sd={r.noise_sd:.4g}"
    return (f"release seq={r.seq} tick={_tick(r.tick)} theta={r.theta:.6g} "
            f"noisy_sum={r.noisy_sum:.6g}{bar}{sd} charge={r.charge:.6g} "
            f"epsilon_spent={r.epsilon_spent:.6g}/{total:.6g} priors_seq={r.priors_seq}{window}"
            + ("" if not r.learning_rounds else f" learning_rounds={r.learning_rounds} "
               f"failure_probability={r.failure_probability:.3g}")
            + ("" if r.mechanism != "tree" else f" mechanism=tree window_tick={r.window_tick} "
               f"nodes={','.join(r.nodes or ())} arity={r.arity} "
               f"max_changes_per_window={r.max_changes_per_window}")
            + "".join(f"\n  group={g} noisy_sum={x.noisy_sum:.6g} ± {x.ci95_half_width:.4g} "
                      f"noise_sd={x.noise_sd:.4g} noisy_count={x.noisy_count:.6g} ± "
                      f"{x.count_ci95_half_width:.4g} count_noise_sd={x.count_noise_sd:.4g}"
                      for g, x in (r.groups or {}).items()))


def _tick(tick: int | None) -> str:
    return "-" if tick is None else str(tick)


def priors_line(p: PriorsRecord) -> str:
    law = ", ".join(f"{x:g}:{q:.3f}" for x, q in zip(p.support, p.probs, strict=False))
    return (f"priors seq={p.seq} tick={_tick(p.tick)} group={p.group} status={p.status} "
            f"radius={p.radius:.4g} "
            f"epsilon_learn={p.epsilon_learn:g} epsilon_spent={p.epsilon_spent:.6g} "
            f"law={{{law}}}")


def deadletter_line(d: DeadLetter) -> str:
    """Where the rejected record is and why; never its bytes (``raw``, when kept: --json)."""
    def known(v: int | None) -> str:
        return "-" if v is None else str(v)

    detail = "" if d.detail is None else f" detail={json.dumps(d.detail)}"
    return (f"deadletter reason={d.reason} source_topic={d.source_topic} "
            f"partition={known(d.partition)} offset={known(d.offset)}{detail}")


def render(kind: str, raw: bytes | None, as_json: bool) -> str | None:
    """The line for one record of ``kind`` (a KINDS entry); None if it is unreadable."""
    try:
        if as_json:
            text = (raw or b"").decode("utf-8").strip()
            doc = json.loads(text)
            if not isinstance(doc, dict):
                return None
            return text if "\n" not in text else json.dumps(doc)
        if kind == "releases":
            return release_line(Release.model_validate_json(raw or b""))
        if kind == "deadletter":
            return deadletter_line(DeadLetter.model_validate_json(raw or b""))
        return priors_line(PriorsRecord.model_validate_json(raw or b""))
    except (ValueError, ValidationError):  # JSON, UTF-8 and schema errors
        return None


def chosen_topics(settings: Settings, spec: str) -> dict[str, str]:
    """``--topics`` (kinds or configured topic names, comma-separated) -> {topic: kind}."""
    names = {"releases": settings.topic_releases, "priors": settings.topic_priors,
             "deadletter": settings.topic_deadletter}
    chosen: dict[str, str] = {}
    for item in (part.strip() for part in spec.split(",")):
        kind = next((k for k, t in names.items() if item in (k, t)), None)
        if kind is None:
            raise PufferfishInputError("--topics", f"unknown topic {item!r} (choose from "
                                       f"{', '.join(KINDS)})")
        chosen[names[kind]] = kind
    return chosen


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _partitions(settings: Settings, topics: Sequence[str], timeout: float) -> dict[str, int]:
    """Partition counts of ``topics``, waiting (noted once on stderr) until they all exist."""
    noted = False
    while True:
        counts = await common.partition_counts(aiokafka_kwargs(settings), settings, timeout)
        missing = [t for t in topics if not counts.get(t)]
        if not missing:
            return counts
        if not noted:
            _say(f"pufferfish tail: waiting for topic {', '.join(map(repr, missing))} "
                 "(a worker creates it at start)")
            noted = True
        await asyncio.sleep(WAIT_NOTE_SECONDS)


async def follow(settings: Settings, topics: dict[str, str], as_json: bool,
                 from_beginning: bool, limit: int | None, timeout: float) -> None:
    counts = await _partitions(settings, list(topics), timeout)
    consumer = AIOKafkaConsumer(
        **consumer_kwargs(settings), group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
        request_timeout_ms=int(timeout * 1000),
    )
    try:
        await common.bounded(consumer.start(), timeout, settings, common.CONNECT)
        tps = [TopicPartition(t, p) for t in topics for p in range(counts[t])]
        consumer.assign(tps)
        seek = consumer.seek_to_beginning if from_beginning else consumer.seek_to_end
        await common.bounded(seek(*tps), timeout, settings, "seek")
        printed = 0
        while limit is None or printed < limit:
            batch = await consumer.getmany(timeout_ms=1000)
            records: list[ConsumerRecord[Any, Any]] = list(
                heapq.merge(*batch.values(), key=lambda r: r.timestamp))
            for rec in records:
                line = render(topics[rec.topic], rec.value, as_json)
                if line is None:
                    _say(f"pufferfish: warning: {rec.topic}: offset {rec.offset}: "
                         "unreadable record skipped")
                    continue
                print(line, flush=True)
                printed += 1
                if limit is not None and printed >= limit:
                    break
    finally:
        await common.quietly(consumer.stop(), timeout)


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments.CommandParser(
        "pufferfish tail",
        "Follow the releases and priors (or deadletter) topics, one line per record.")
    arguments.add_config(parser)
    arguments.add_broker(parser)
    parser.add_argument("--json", action="store_true", help="each record's JSON, one per line")
    parser.add_argument("--from-beginning", action="store_true",
                        help="read the topics' history first (default: new records only)")
    parser.add_argument("--topics", default=",".join(DEFAULT_KINDS), metavar="LIST",
                        help="comma-separated: releases, priors, deadletter")
    parser.add_argument("--max", type=_positive_int, metavar="N",
                        help="stop after N records (default: follow until Ctrl-C)")
    arguments.add_timeout(parser, common.DEFAULT_TIMEOUT, "at start")
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        settings = load_settings(args.config, {"broker": args.broker} if args.broker else {})
        topics = chosen_topics(settings, args.topics)
    except PufferfishInputError as exc:
        return common.fail(exc)
    common.quiet_kafka_logs()
    try:
        common.run_until_interrupted(follow(settings, topics, args.json, args.from_beginning,
                                            args.max, args.timeout))
    except PufferfishInputError as exc:
        return common.fail(exc)
    except KeyboardInterrupt:
        return common.EXIT_OK
    # a closed stdout (`pufferfish tail | head`) ends in stream_app.cli, as for every command
    return common.EXIT_OK
