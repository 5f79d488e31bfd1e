"""The public topics: name, record model, key, partitions, retention, and their JSON Schemas.

Schemas come from the wire models (``stream_app.domain.models``) via pydantic's
``model_json_schema``
(validation mode: what the worker accepts on an input topic, what a reader of an output topic
may meet, including the older journal records that lack the newer fields). Field descriptions
live on the models. The schemas are JSON Schema draft-07, the dialect AsyncAPI 2.x payloads
use; nested models (a release's ``groups``) go under draft-07's ``definitions``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from stream_app.domain.models import DeadLetter, Membership, PriorsRecord, Release, Report
from stream_app.domain.rejection import REJECT_REASONS
from stream_app.settings import Settings

JSON_SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"
ID_PREFIX = "urn:pufferfish-stream:schema:"
INPUT_PARTITIONS_DEFAULT: int = Settings.model_fields["input_partitions"].default

USER_ID_KEY = (
    "The record key is the record's user_id as UTF-8 bytes, never null (else the record is "
    "dead-lettered key_mismatch). The record must be on partition "
    "toPositive(murmur2(key)) mod input_partitions: murmur2 of the key as in Kafka's Java "
    "default partitioner (Utils.murmur2, seed 0x9747b28c; toPositive(h) = h & 0x7fffffff), "
    "also aiokafka's and kafka-python's default; librdkafka clients (confluent-kafka, kcat) "
    "must set partitioner=murmur2_random (their default consistent_random is CRC32). A record "
    "on another partition is dead-lettered wrong_partition."
)
NO_KEY = "No key (null): the topic has one partition; records are in publication order."
JOURNAL = (
    "One partition, infinite retention (retention.ms = retention.bytes = -1, "
    "cleanup.policy delete, never compacted): it is the budget journal a worker restores the "
    "spent budget and the laws in force from. Do not shorten its retention. Read it with "
    "isolation.level=read_committed: on a broker with transactions each tick's records are "
    "one transaction, and a reader of uncommitted records also sees those of transactions "
    "that were aborted (a release owner fenced by its successor), which are not publications "
    "(the worker counts their charges all the same)."
)


@dataclass(frozen=True)
class TopicContract:
    setting: str  # the Settings field naming the topic (operators may rename it)
    model: type[BaseModel]
    direction: Literal["in", "out"]  # in: producers send, the worker reads; out: the reverse
    summary: str
    key: str
    partitions: int | None  # None: input_partitions
    journal: bool = False

    @property
    def topic(self) -> str:
        """The default topic name (setting ``self.setting``)."""
        default: str = Settings.model_fields[self.setting].default
        return default

    @property
    def file_name(self) -> str:
        return f"{self.topic}.schema.json"

    @property
    def message(self) -> str:
        return self.model.__name__

    def partitions_text(self) -> str:
        if self.partitions is None:
            return (
                f"input_partitions partitions (default {INPUT_PARTITIONS_DEFAULT}), the same "
                "count on reports and membership; the worker creates the topic if it is "
                "missing and refuses to start on another count."
            )
        return JOURNAL if self.journal else "One partition."

    def description(self) -> str:
        return (
            f"{self.summary} Topic {self.topic!r} (setting {self.setting}); values are one "
            f"UTF-8 JSON object per record; unknown fields are ignored. Key: {self.key} "
            f"Partitions: {self.partitions_text()}"
        )


CONTRACTS: tuple[TopicContract, ...] = (
    TopicContract(
        "topic_reports", Report, "in",
        "Reports: a present user's value; the sum counts each present user's newest report. "
        "A record that fails a rule is dead-lettered, never applied.",
        USER_ID_KEY, None),
    TopicContract(
        "topic_membership", Membership, "in",
        "Membership: a user joins (a group) or leaves. Co-partitioned with reports: one worker "
        "owns all of a user's records.",
        USER_ID_KEY, None),
    TopicContract(
        "topic_releases", Release, "out",
        "Releases: one noisy sum per release on the public clock, with its noise scale theta, "
        "error bar and budget charge; with release_by_group also every configured group's "
        "noisy sum and noisy count (groups).",
        NO_KEY, 1, journal=True),
    TopicContract(
        "topic_priors", PriorsRecord, "out",
        "Priors: the DP-learned law of every configured group in each learning round; "
        "theta is calibrated on these published laws.",
        NO_KEY, 1, journal=True),
    TopicContract(
        "topic_deadletter", DeadLetter, "out",
        "Dead letters: every rejected input record with a machine-readable reason, where it "
        "was read (source_topic, partition, offset) and what failed (detail); its values "
        "(raw) only when the worker runs with deadletter_include_raw=true.",
        NO_KEY, 1),
)


def topic_schema(contract: TopicContract) -> dict[str, Any]:
    """The JSON Schema (draft-07) of one topic's record values."""
    # draft-07 keeps nested models under "definitions" ("$defs" is a newer keyword)
    schema = contract.model.model_json_schema(ref_template="#/definitions/{model}")
    if "$defs" in schema:
        schema["definitions"] = schema.pop("$defs")
    schema["$schema"] = JSON_SCHEMA_DIALECT
    schema["$id"] = ID_PREFIX + contract.topic
    schema["title"] = f"{contract.message} (topic {contract.topic})"
    schema["description"] = contract.description()
    if contract.model is DeadLetter:
        # the model keeps a plain str; the schema lists the labels this version writes
        schema["properties"]["reason"]["enum"] = list(REJECT_REASONS)
    return schema
