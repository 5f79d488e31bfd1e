"""Which partial the releaser keeps per input partition, as the partials topic is read.

The collect agent reads the partials topic from its committed offset. After a rebalance or a
broker outage (offset commits that failed) that offset lags, and records already applied are
read again: applied as they come, an older partial would replace a newer one for a moment, and
a release in that moment would publish a sum older than the one before it. So a partial is kept
only if it comes from a later offset than the one held (docs/design.md, "Partials").
"""

from __future__ import annotations


def supersedes(held: int | None, offset: int, log_end: int | None) -> bool:
    """Whether the partial read at ``offset`` replaces the one held, read at ``held`` (None:
    none held, or held by an older version without offsets).

    ``log_end`` is the partition's end offset as the consumer knows it (None: unknown). A log
    that ends at or before ``held`` was reset (a broker that came back empty, which a Kafka log
    never does): its records are newer than anything held.
    """
    if held is None or offset > held:
        return True
    return log_end is not None and log_end <= held
