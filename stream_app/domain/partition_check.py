"""The input path's check of the partitioning contract (``stream_app.kafka.partitioning``):
a record on another partition than its key's is refused ``wrong_partition`` before it touches
any state."""

from __future__ import annotations

import functools

from stream_app.domain.rejection import wrong_partition
from stream_app.kafka.partitioning import murmur2_u32

# keys remembered by a PartitionCheck: ~150 bytes each (key, int, LRU link) -> ~10 MiB at most
DEFAULT_CACHE_KEYS = 1 << 16


class PartitionCheck:
    """Checks that records sit on their key's contract partition; expected partitions cached
    per key (bounded LRU, at most ``cache_keys`` keys)."""

    def __init__(self, partitions: int, cache_keys: int = DEFAULT_CACHE_KEYS) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self.partitions = partitions
        self.expected = functools.lru_cache(maxsize=cache_keys)(self._expected)

    def _expected(self, key: bytes) -> int:
        return (murmur2_u32(key) & 0x7FFFFFFF) % self.partitions

    def check(self, key: bytes, partition: int) -> None:
        """Rejected("wrong_partition", "expected partition E of N") unless ``partition`` is
        the key's contract partition."""
        expected = self.expected(key)
        if expected != partition:
            raise wrong_partition(expected, self.partitions)
