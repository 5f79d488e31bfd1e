"""No offset commit is handed to a consumer thread that is stopping.

Faust's consumer commits through its client thread's method queue
(``ThreadDelegateConsumer._commit``, ``QueueServiceThread.call_thread``). A thread told to stop
(``app.crash`` marks every service crashed at once) stops its method queue first and closes its
event loop later; a call queued in between is never answered, and the stop awaiting it never
ends. Seen in CI: a worker stopping on a write not acknowledged hung in Faust's final commit
until it was killed. Such a commit is skipped instead: offsets not committed are processed
again after the restart, exactly (docs/design.md, "Delivery semantics"). The input agent
commits the acknowledged offsets itself before it crashes the app (input_agent.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


class CommitGuard:
    """Consumer mixin: ``_commit`` returns False, without a call, once the client thread stops."""

    _thread: Any

    async def _commit(self, offsets: Mapping[Any, int]) -> bool:
        if self._thread.should_stop:
            log.info("offsets not committed: the consumer's client thread is stopping")
            return False
        return bool(await super()._commit(offsets))  # type: ignore[misc]
