"""A minimal pufferfish-stream producer: plain aiokafka, no project import.

    pip install aiokafka
    python examples/producer.py --bootstrap 127.0.0.1:9092 --users 10 --reports 3

Wire format (JSON values, docs/design.md): ``membership`` gets ``{"user_id", "event": "join" |
"leave", "group"?, "ts"}``, ``reports`` gets ``{"user_id", "value", "report_id", "ts"}`` with
``value`` in the configured domain and ``ts`` in seconds since the epoch.

Partitioning contract: key = ``user_id`` as UTF-8, partition = murmur2(key) mod the topic's
partition count. aiokafka's default partitioner is exactly that (Kafka's Java default), so
setting the key is enough. With confluent-kafka / librdkafka set ``"partitioner":
"murmur2_random"`` (their default is CRC32: the worker dead-letters those records
``wrong_partition``).

A report from a user the worker has not seen join is dead-lettered ``not_present`` (the two
topics are consumed independently): send the joins first, as here, or set ``auto_join``.
SASL/TLS: pass ``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``,
``sasl_plain_password`` and ``ssl_context=aiokafka.helpers.create_ssl_context(cafile=...)``
to ``AIOKafkaProducer``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from aiokafka import AIOKafkaProducer


async def produce(args: argparse.Namespace) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, acks="all")
    await producer.start()
    sent = 0
    try:
        users = [f"user-{i}" for i in range(args.users)]
        for user in users:
            join = {"user_id": user, "event": "join", "ts": time.time()}
            if args.group:
                join["group"] = args.group
            await producer.send(args.membership_topic, json.dumps(join).encode(),
                                key=user.encode("utf-8"))
            sent += 1
        await producer.flush()  # every join acknowledged before the first report
        for k in range(args.reports):
            for user in users:
                report = {"user_id": user, "value": random.choice(args.domain),
                          "report_id": f"{user}-{k}", "ts": time.time()}
                await producer.send(args.reports_topic, json.dumps(report).encode(),
                                    key=user.encode("utf-8"))
                sent += 1
        await producer.flush()
    finally:
        await producer.stop()
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="host:port[,host:port]")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--reports", type=int, default=3, help="reports per user")
    parser.add_argument("--domain", type=float, nargs="+", default=[0.0, 1.0],
                        help="values to draw reports from (the worker's domain)")
    parser.add_argument("--group", help="group named in each join (default: none)")
    parser.add_argument("--reports-topic", default="reports")
    parser.add_argument("--membership-topic", default="membership")
    args = parser.parse_args()
    print(f"sent {asyncio.run(produce(args))} records")


if __name__ == "__main__":
    main()
