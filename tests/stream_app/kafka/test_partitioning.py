"""The partitioning contract (stream_app.kafka.partitioning) against independent sources.

Sources, none of them our code: the Java client's own test vectors (Kafka's UtilsTest.testMurmur2
and the Java DefaultPartitioner's partitions of a few keys over 1000 partitions, as kafka-python's
test_partitioner quotes them), aiokafka's pure-Python murmur2, and librdkafka's murmur2_random
partitioner (confluent-kafka) producing to a real broker, read back partition by partition.
"""

from __future__ import annotations

import asyncio
import random
import zlib

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import create_topics
from stream_app.domain.partition_check import PartitionCheck
from stream_app.domain.rejection import Rejected
from stream_app.kafka.partitioning import murmur2, partition_for
from tests.kafka_helpers import consume_all

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (Java's signed int results)
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# the Java client's DefaultPartitioner over 1000 partitions (kafka-python's test_partitioner)
JAVA_PARTITION_OF_1000 = {
    b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742,
}


def sample_keys(n: int, seed: int) -> list[bytes]:
    """User ids as producers write them: ASCII ids, UUID-like, non-ASCII UTF-8, every tail."""
    rng = random.Random(seed)
    keys = [f"user-{i}".encode() for i in range(n // 2)]
    keys += [f"ü-σ-用户-{i}".encode() for i in range(n // 8)]
    keys += [f"{rng.getrandbits(128):032x}".encode() for _ in range(n // 8)]
    keys += ["".join(rng.choice("abcXYZ019_-.") for _ in range(length)).encode()
             for length in range(1, 40)]
    return list(dict.fromkeys(keys))


def test_murmur2_java_vectors() -> None:
    for data, want in JAVA_MURMUR2.items():
        assert murmur2(data) == want, data


def test_partition_for_java_partitioner() -> None:
    for key, want in JAVA_PARTITION_OF_1000.items():
        assert partition_for(key, 1000) == want, key


def test_murmur2_matches_aiokafka_on_random_bytes() -> None:
    rng = random.Random(17)
    for _ in range(5000):
        data = rng.randbytes(rng.randrange(0, 70))
        assert murmur2(data) & 0xFFFFFFFF == aiokafka_murmur2(data) & 0xFFFFFFFF, data
        n = rng.randrange(1, 300)
        assert partition_for(data, n) == (aiokafka_murmur2(data) & 0x7FFFFFFF) % n


def test_partition_check() -> None:
    check = PartitionCheck(4, cache_keys=8)
    for key in sample_keys(64, seed=1):
        home = partition_for(key, 4)
        check.check(key, home)
        for other in set(range(4)) - {home}:
            with pytest.raises(Rejected) as info:
                check.check(key, other)
            assert info.value.reason == "wrong_partition"
            java_home = (aiokafka_murmur2(key) & 0x7FFFFFFF) % 4
            assert info.value.detail == f"expected partition {java_home} of 4"
    assert check.expected.cache_info().currsize == 8  # bounded
    with pytest.raises(ValueError):
        PartitionCheck(0)


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("partitions", [4, 7])
def test_librdkafka_murmur2_random_lands_where_the_contract_says(
    broker_module: EmbeddedBroker, partitions: int
) -> None:
    """confluent-kafka with partitioner=murmur2_random puts every key on partition_for(key, N);
    its default (consistent_random: CRC32) does not."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    bootstrap = broker_module.bootstrap
    keys = sample_keys(400, seed=partitions)
    landed: dict[str, dict[bytes, int]] = {}
    for partitioner in ("murmur2_random", "consistent_random"):
        topic = f"contract-{partitioner}-{partitions}"
        asyncio.run(create_topics(bootstrap, {topic: partitions}))
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "partitioner": partitioner, "linger.ms": 5}
        )
        for key in keys:
            producer.produce(topic, value=b"x", key=key)
        assert producer.flush(60) == 0
        records = asyncio.run(consume_all(bootstrap, topic, timeout=60, min_count=len(keys)))
        landed[partitioner] = {r.key: r.partition for r in records if r.key is not None}
        assert set(landed[partitioner]) == set(keys) and len(records) == len(keys)

    murmur = landed["murmur2_random"]
    assert {k: partition_for(k, partitions) for k in keys} == murmur
    crc = landed["consistent_random"]
    assert crc == {k: zlib.crc32(k) % partitions for k in keys}
    # the two partitioners disagree on most keys: such a producer breaks the contract
    assert sum(crc[k] != murmur[k] for k in keys) > len(keys) // 2
