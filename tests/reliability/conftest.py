"""The brokers the reliability scenarios run on (tests/README.md, "Brokers").

`each_broker` runs a test once on tansu (the module's `broker_module`) and once on Apache Kafka
(the session's `kafka_broker`): the same scenario, parametrized, never copied. Kafka's case is
in xdist_group("kafka"), so that one process (and one Kafka) runs every Kafka test. A test that
runs on some of them only narrows it with harness.KAFKA / harness.TANSU:
`@pytest.mark.parametrize("each_broker", [KAFKA], indirect=True)`, or with its other
parameters in one list of (store, broker) pairs (`harness.on_brokers`, which marks each Kafka
pair). A module with an xdist group of its own cannot hold a Kafka case (xdist joins the names:
its Kafka case would run in another group, beside another Kafka). Workers get the broker's
settings from `harness.compat_for(broker)`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.reliability.harness import BROKERS


@pytest.fixture(params=BROKERS)
def each_broker(request: pytest.FixtureRequest) -> Any:
    """tansu (one per module and xdist process) or Apache Kafka (one per xdist process)."""
    return request.getfixturevalue("broker_module" if request.param == "tansu"
                                   else "kafka_broker")


@pytest.fixture(params=BROKERS)
def each_fresh_broker(request: pytest.FixtureRequest) -> Any:
    """As `each_broker`, with a tansu of the test's own (`broker`) for the long scenarios."""
    return request.getfixturevalue("broker" if request.param == "tansu" else "kafka_broker")
