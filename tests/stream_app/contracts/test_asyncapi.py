"""The committed AsyncAPI document: it parses (JSON, hence YAML), is a structurally valid AsyncAPI
2.6.0 document with Kafka 0.4.0 bindings, names every topic, states the keys and partitioning
contract, agrees with the topics the worker creates, and references schema files that exist."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from stream_app.kafka.topics import JOURNAL_CONFIG, journal_topics, wanted_topics
from stream_app.settings import Settings
from tests.stream_app.contracts.contract_files import SCHEMAS, TOPICS, load

EXTENSION = re.compile(r"^x-[\w\d.\-_]+$")
DOC = load("asyncapi.json")
CHANNEL_KEYS = {"description", "subscribe", "publish", "parameters", "bindings", "servers", "$ref"}
OPERATION_KEYS = {"traits", "summary", "description", "security", "tags", "externalDocs",
                  "operationId", "bindings", "message"}
MESSAGE_KEYS = {"schemaFormat", "contentType", "headers", "messageId", "payload",
                "correlationId", "tags", "summary", "name", "title", "description",
                "externalDocs", "deprecated", "examples", "bindings", "traits"}
KAFKA_CHANNEL_KEYS = {"topic", "partitions", "replicas", "topicConfiguration", "bindingVersion"}
KAFKA_MESSAGE_KEYS = {"key", "schemaIdLocation", "schemaIdPayloadEncoding",
                      "schemaLookupStrategy", "bindingVersion"}


def _only(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = {k for k in obj if k not in allowed and not EXTENSION.match(k)}
    assert not extra, f"{where}: not AsyncAPI 2.6.0 fields: {sorted(extra)}"


def _resolve(ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = DOC
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def test_document_parses_as_yaml_too() -> None:
    text = (SCHEMAS / "asyncapi.json").read_text(encoding="ascii")
    assert yaml.safe_load(text) == DOC


def test_structure_of_an_asyncapi_2_6_document() -> None:
    """The required fields and allowed keys of the AsyncAPI 2.6.0 schema (asyncapi/spec-json-
    schemas 2.6.0.json, and bindings/kafka/0.4.0 channel.json and message.json)."""
    _only(DOC, {"asyncapi", "id", "info", "servers", "defaultContentType", "channels",
                "components", "tags", "externalDocs"}, "document")
    assert DOC["asyncapi"] == "2.6.0"
    assert DOC["info"]["title"] and re.fullmatch(r"\d+\.\d+\.\d+", DOC["info"]["version"])
    _only(DOC["info"], {"title", "version", "description", "termsOfService", "contact",
                        "license"}, "info")
    for name, server in DOC["servers"].items():
        assert {"url", "protocol"} <= set(server) and server["protocol"] == "kafka", name
        for var in re.findall(r"{(\w+)}", server["url"]):
            assert var in server["variables"], (name, var)
    tag_names = {t["name"] for t in DOC["tags"]}
    for name, channel in DOC["channels"].items():
        _only(channel, CHANNEL_KEYS, f"channel {name}")
        operations = [op for op in ("publish", "subscribe") if op in channel]
        assert len(operations) == 1, name
        operation = channel[operations[0]]
        _only(operation, OPERATION_KEYS, f"channel {name} {operations[0]}")
        assert {t["name"] for t in operation["tags"]} <= tag_names
        message = _resolve(operation["message"]["$ref"])
        _only(message, MESSAGE_KEYS, f"message of {name}")
        assert message["contentType"] == "application/json"
        kafka = channel["bindings"]["kafka"]
        _only(kafka, KAFKA_CHANNEL_KEYS, f"channel {name} kafka binding")
        assert kafka["bindingVersion"] == "0.4.0" and kafka["topic"] == name
        assert kafka.get("partitions", 1) >= 1
        assert set(kafka.get("topicConfiguration", {})) <= {
            "cleanup.policy", "retention.ms", "retention.bytes", "delete.retention.ms",
            "max.message.bytes"}
        key_binding = message["bindings"]["kafka"]
        _only(key_binding, KAFKA_MESSAGE_KEYS, f"message of {name} kafka binding")
        assert key_binding["bindingVersion"] == "0.4.0" and "type" in key_binding["key"]
    ids = [op["operationId"] for c in DOC["channels"].values()
           for op in (c.get("publish"), c.get("subscribe")) if op]
    assert len(ids) == len(set(ids))


def test_every_topic_is_a_channel_with_its_schema_file() -> None:
    assert sorted(DOC["channels"]) == sorted(TOPICS)
    assert sorted(SCHEMAS.glob("*.schema.json")) == sorted(
        SCHEMAS / f"{t}.schema.json" for t in TOPICS)
    for topic, channel in DOC["channels"].items():
        operation = channel.get("publish") or channel["subscribe"]
        message = _resolve(operation["message"]["$ref"])
        ref = message["payload"]["$ref"]
        assert ref == f"{topic}.schema.json" and (SCHEMAS / ref).is_file()
        schema = load(ref)
        assert schema["$id"].endswith(f":{topic}") and message["name"] in schema["title"]
        assert message["schemaFormat"] == "application/schema+json;version=draft-07"
        assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
        assert all(p.get("description") for p in schema["properties"].values()), topic


@pytest.mark.usefixtures("clean_env")
def test_bindings_agree_with_the_topics_the_worker_creates() -> None:
    settings = Settings()
    partitions = wanted_topics(settings)
    journals = journal_topics(settings)
    for topic, channel in DOC["channels"].items():
        assert topic in partitions
        kafka = channel["bindings"]["kafka"]
        if topic in (settings.topic_reports, settings.topic_membership):
            assert "publish" in channel and "partitions" not in kafka
            assert kafka["x-partitions"] == "input_partitions"
        else:
            assert "subscribe" in channel and kafka["partitions"] == partitions[topic] == 1
        config = kafka.get("topicConfiguration")
        if topic in journals:
            assert config == {"cleanup.policy": [JOURNAL_CONFIG["cleanup.policy"]],
                              "retention.ms": int(JOURNAL_CONFIG["retention.ms"]),
                              "retention.bytes": int(JOURNAL_CONFIG["retention.bytes"])}
            assert "infinite retention" in channel["description"]
            assert "journal" in channel["description"]
        else:
            assert config is None


def test_keys_and_the_partitioning_contract_are_stated() -> None:
    for topic, channel in DOC["channels"].items():
        operation = channel.get("publish") or channel["subscribe"]
        key = _resolve(operation["message"]["$ref"])["bindings"]["kafka"]["key"]
        if topic in ("reports", "membership"):
            assert key["type"] == "string"
            for words in ("user_id", "murmur2", "Java default partitioner",
                          "partitioner=murmur2_random", "wrong_partition"):
                assert words in key["description"] and words in channel["description"], words
        else:
            assert key["type"] == "null"
    assert "murmur2_random" in DOC["info"]["description"]
