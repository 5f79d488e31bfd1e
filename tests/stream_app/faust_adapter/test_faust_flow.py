"""Records Faust's flow control wipes from stream buffers are fetched again
(stream_app/faust_adapter/flow.py, PufferfishConsumer.refetch)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from faust.types import TP
from mode.utils.queues import FlowControlQueue

from stream_app.faust_adapter.app import new_app
from stream_app.faust_adapter.flow import RefetchingFlowControl, first_offsets
from stream_app.settings import Settings

REPORTS0, REPORTS1, PARTIALS = TP("reports", 0), TP("reports", 1), TP("partials", 0)


def _event(tp: TP, offset: int) -> Any:
    return SimpleNamespace(message=SimpleNamespace(tp=tp, offset=offset))


def test_first_offsets_per_partition() -> None:
    items = [_event(REPORTS0, 7), _event(REPORTS1, 3), _event(REPORTS0, 5), object()]
    assert first_offsets(items) == {REPORTS0: 5, REPORTS1: 3}


async def test_a_resume_reports_what_it_wiped_and_empties_the_buffers() -> None:
    dropped: list[dict[Any, int]] = []
    flow = RefetchingFlowControl(on_dropped=dropped.append)
    agent_buffer = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    other_buffer = FlowControlQueue(flow_control=flow, clear_on_resume=True)
    kept = FlowControlQueue(flow_control=flow)  # not cleared on resume: not reported
    for offset in (4, 5):
        agent_buffer.put_nowait(_event(REPORTS0, offset))
    other_buffer.put_nowait(_event(REPORTS0, 2))
    other_buffer.put_nowait(_event(PARTIALS, 9))
    kept.put_nowait(_event(REPORTS1, 1))
    flow.resume()
    assert dropped == [{REPORTS0: 2, PARTIALS: 9}]
    assert agent_buffer.empty() and other_buffer.empty() and kept.qsize() == 1
    flow.resume()  # nothing buffered: nothing to fetch again
    assert len(dropped) == 1


async def test_the_app_s_flow_control_makes_its_consumer_fetch_again() -> None:
    app = new_app(Settings(), "flow-test", broker="kafka://127.0.0.1:1", store="memory://",
                  web_enabled=False)
    consumer = app.consumer
    seeks: list[tuple[TP, int]] = []
    consumer._thread = SimpleNamespace(seek=lambda tp, offset: seeks.append((tp, offset)))
    consumer.assignment = lambda: {REPORTS0, PARTIALS}
    buffer = FlowControlQueue(flow_control=app.flow_control, clear_on_resume=True)
    buffer.put_nowait(_event(REPORTS0, 1))
    buffer.put_nowait(_event(REPORTS1, 6))  # no longer assigned: its next owner reads it
    app.flow_control.resume()
    assert seeks == [(REPORTS0, 1)]
    assert consumer._expected.expected(REPORTS0) == 1 and consumer._read_offset[REPORTS0] == 1
