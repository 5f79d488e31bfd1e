"""The partitioning contract of the input topics (docs/design.md, "Partitioning contract").

Both input topics (reports, membership) are keyed by ``user_id`` (UTF-8) and a record's partition
must be ``toPositive(murmur2(key)) % N`` with N = ``input_partitions``: the Java client's default
partitioner (also aiokafka's default; librdkafka clients such as confluent-kafka and kcat need
``partitioner=murmur2_random``). One worker then owns all of a user's records. A record on another
partition is dead-lettered ``wrong_partition`` before it touches any state
(``stream_app.domain.ingest``).

``murmur2`` is Java's ``org.apache.kafka.common.utils.Utils.murmur2``, written here from that
definition; the tests pin it against Java vectors and against librdkafka's murmur2 partitioner
through a real broker. The input path's check is
``stream_app.domain.partition_check``.
"""

from __future__ import annotations

import struct

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2_u32(data: bytes) -> int:
    """Java's ``Utils.murmur2(data)`` as an unsigned 32-bit integer."""
    length = len(data)
    h = _SEED ^ length
    blocks = length >> 2
    if blocks:
        for k in struct.unpack_from(f"<{blocks}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        i = length - tail
        if tail == 3:
            h ^= data[i + 2] << 16
        if tail >= 2:
            h ^= data[i + 1] << 8
        h = ((h ^ data[i]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def murmur2(data: bytes) -> int:
    """Java's ``Utils.murmur2(data)``: a signed 32-bit int, as Java returns it."""
    h = murmur2_u32(data)
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The contract's partition of ``key``: Java's ``toPositive(murmur2(key)) % partitions``."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    return (murmur2_u32(key) & 0x7FFFFFFF) % partitions
