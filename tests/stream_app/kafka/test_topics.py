"""stream_app.kafka.topics: the one topic list and the one creation path, on a real broker."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream_app.demo.broker import EmbeddedBroker
from stream_app.demo.broker_admin import topic_partitions
from stream_app.kafka.topics import TopicSetupError, create_topics, ensure_topics, wanted_topics
from stream_app.settings import Settings

pytestmark = pytest.mark.integration


def _settings(broker: EmbeddedBroker, tag: str) -> Settings:
    names = ("reports", "membership", "releases", "priors", "deadletter", "partials")
    return Settings(broker=broker.url, input_partitions=3,
                    **{f"topic_{n}": f"{n}-{tag}" for n in names})  # type: ignore[arg-type]


def test_the_topic_list_names_every_topic_of_a_worker(broker_module: EmbeddedBroker) -> None:
    s = _settings(broker_module, "list")
    assert wanted_topics(s) == {
        "reports-list": 3, "membership-list": 3, "partials-list": 1, "releases-list": 1,
        "priors-list": 1, "deadletter-list": 1,
    }


async def _journal_retention(bootstrap: str, topics: list[str]) -> dict[str, str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        found = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
    finally:
        await admin.close()
    out: dict[str, str] = {}
    for response in found:
        for resource in response.resources:
            for entry in resource[4]:
                if entry[0] == "retention.ms":
                    out[resource[3]] = entry[1]
    return out


def test_ensure_topics_creates_everything_with_journal_retention(
    broker_module: EmbeddedBroker,
) -> None:
    s = _settings(broker_module, "ensure")
    asyncio.run(ensure_topics(s, timeout=30))
    existing = asyncio.run(topic_partitions(broker_module.bootstrap))
    assert {t: existing[t] for t in wanted_topics(s)} == wanted_topics(s)
    retention = asyncio.run(_journal_retention(broker_module.bootstrap,
                                               ["releases-ensure", "priors-ensure"]))
    # the releases and priors topics are journals: they never expire
    assert retention == {"releases-ensure": "-1", "priors-ensure": "-1"}
    asyncio.run(ensure_topics(s, timeout=30))  # idempotent


def test_a_wrong_partition_count_is_refused_naming_the_topic(
    broker_module: EmbeddedBroker,
) -> None:
    client = {"bootstrap_servers": broker_module.bootstrap}
    asyncio.run(create_topics(client, {"count-check": 2}))
    with pytest.raises(TopicSetupError, match="'count-check' has 2 partitions, expected 3"):
        asyncio.run(create_topics(client, {"count-check": 3}))
    with pytest.raises(TopicSetupError, match="partitions >= 1"):
        asyncio.run(create_topics(client, {"zero": 0}))


def test_an_unreachable_broker_is_one_error_within_the_timeout() -> None:
    s = Settings(broker="kafka://127.0.0.1:1")
    with pytest.raises(TopicSetupError, match="broker: .* not reachable in 2 s"):
        asyncio.run(ensure_topics(s, timeout=2))
