"""The throughput bench's Faust pipelines: stock ones run Faust's own consumer and flow control,
the others the worker's (the end-to-end smoke run is tests/bench/test_smoke.py)."""

from __future__ import annotations

import faust
import pytest
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from mode.utils.queues import FlowControlEvent

from bench import faust_pipelines
from stream_app.faust_adapter.consumer import PufferfishConsumer
from stream_app.faust_adapter.flow import RefetchingFlowControl
from stream_app.settings import Settings


def settings() -> Settings:
    return Settings(broker="kafka://127.0.0.1:1", app_id="pipelines-test")


@pytest.mark.parametrize("kind", ["stock-bare", "stock-recipe"])
def test_stock_pipelines_run_fausts_own_consumer_and_flow_control(kind: str) -> None:
    app = faust_pipelines.build_app(kind, settings())
    assert isinstance(app, faust.App)
    assert app.transport.Consumer is FaustAIOKafkaConsumer
    assert type(app.flow_control) is FlowControlEvent
    app.on_init_dependencies()  # where Faust adds its Monitor to the sensors
    assert app.monitor not in app.sensors  # as in the worker: the consumer is the difference


@pytest.mark.parametrize("kind", ["bare", "recipe"])
def test_other_pipelines_run_the_workers_consumer(kind: str) -> None:
    app = faust_pipelines.build_app(kind, settings())
    assert app.transport.Consumer is PufferfishConsumer
    assert isinstance(app.flow_control, RefetchingFlowControl)


def test_commands_name_known_pipelines_only() -> None:
    assert faust_pipelines.command("stock-recipe") == (
        "-m", "bench.faust_pipelines", "stock-recipe")
    with pytest.raises(ValueError, match="unknown Faust pipeline"):
        faust_pipelines.command("stock")
    assert faust_pipelines.main(["nope"]) == 2
