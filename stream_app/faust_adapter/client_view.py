"""The Kafka client's view of each assigned partition right after a fetch (docs/design.md,
"Per-user order across the input topics" and the stall watch).

Taken in the client's thread right after aiokafka's ``Fetcher.fetched_records`` returns (no
other step of the client runs in between), so it matches the records of that fetch: each
partition's position (the next offset it will hand out, past any transaction marker it
skipped), its end (highwater, or the last stable offset when lower) and the client's clock when
that end was read from a fetch response (aiokafka's ``last_poll_timestamp``).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ClientView(NamedTuple):
    position: int | None  # None: being reset
    end: int | None  # None or -1: no fetch response seen yet
    poll_ms: int | None


class FetchedRecords(dict[Any, Any]):
    """A fetch's records by partition (what Faust's ``_getmany`` returns), with the client's
    view of every assigned partition after it."""

    def __init__(self, records: Any = (), views: dict[Any, ClientView] | None = None) -> None:
        super().__init__(records)
        self.views: dict[Any, ClientView] = views or {}


def client_views(consumer: Any) -> dict[Any, ClientView]:
    """Read in the client's thread from an ``aiokafka.AIOKafkaConsumer`` (the attributes its
    public ``position``, ``highwater``, ``last_stable_offset`` and ``last_poll_timestamp``
    read; those await or assert, this must not)."""
    subscription = consumer._subscription.subscription
    assignment = subscription.assignment if subscription is not None else None
    if assignment is None:
        return {}
    views = {}
    for tp in assignment.tps:
        state = assignment.state_value(tp)
        end, lso = state.highwater, state.lso
        if end is not None and lso is not None and 0 <= lso < end:
            end = lso
        position = state.position if state.has_valid_position else None
        views[tp] = ClientView(position, end, state.timestamp)
    return views
