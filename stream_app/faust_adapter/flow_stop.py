"""Hooks run when Faust stops the consumer's flow, before it waits for every message handed
out to be acked: a rebalance's revocation (``App._on_partitions_revoked``) and the app's stop
(``App._stop_consumer``) both call ``stop_flow``, then ``wait_empty``. What the worker holds
back on purpose until later (the input agent's write window, ``changelog_flush_seconds``) is
sent then, so the wait ends once the broker has acknowledged it, not when its timer fires
(docs/design.md, "Delivery semantics").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class FlowStopHooks:
    """Consumer mixin: ``on_flow_stopped`` callbacks, called after Faust's ``stop_flow``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_flow_stopped: list[Callable[[], object]] = []

    def stop_flow(self) -> None:
        super().stop_flow()  # type: ignore[misc]
        for hook in list(self.on_flow_stopped):
            hook()
