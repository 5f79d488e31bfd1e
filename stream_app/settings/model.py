"""Worker settings: env ``PUFFERFISH_*``, a JSON file (``PUFFERFISH_CONFIG_FILE``), kwargs.

Priority: keyword arguments > environment > JSON file > defaults. Secrets (``sasl_password``)
are ``SecretStr``: they print as ``**********`` and are never logged.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from pufferfish_core.noise import grid_contains
from pufferfish_core.vocabulary import STREAM_RULES, PairKind, Rule
from stream_app.settings import broker_url
from stream_app.settings.release import ReleaseSettings
from stream_app.settings.store import StoreUrl, check_standbys

CONFIG_FILE_ENV = "PUFFERFISH_CONFIG_FILE"
REMOVED = {
    "release_every_events": "removed: releases happen on the public clock only "
    "(release_period_seconds); an event-count trigger would publish event counts",
    "max_held_reports": "removed: a bound shared by every user let one user's held reports "
    "decide whether another's count; max_held_reports_per_user bounds them (docs/operations.md)",
}

# what an empty list of each says (one validator checks both)
_EMPTY = {
    "domain": "must list at least one value", "pairs": "must name at least one secret-pair set",
}


class Settings(ReleaseSettings):
    model_config = SettingsConfigDict(env_prefix="PUFFERFISH_", extra="forbid")

    # --- broker ---------------------------------------------------------------------------
    broker: str = "kafka://127.0.0.1:9092"
    broker_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT",
                                      "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = "PLAIN"
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None

    # --- topics ---------------------------------------------------------------------------
    app_id: str = Field(default="pufferfish", min_length=1, max_length=200)
    topic_reports: str = Field(default="reports", min_length=1)
    topic_membership: str = Field(default="membership", min_length=1)
    topic_releases: str = Field(default="releases", min_length=1)
    topic_deadletter: str = Field(default="deadletter", min_length=1)
    topic_partials: str = Field(default="pufferfish-partials", min_length=1)
    topic_priors: str = Field(default="priors", min_length=1)
    # release_mechanism=tree: the node journal (raw noise: internal, never public)
    topic_tree_nodes: str = Field(default="pufferfish-tree-nodes", min_length=1)
    input_partitions: int = Field(default=4, ge=1, le=1024)

    # --- privacy --------------------------------------------------------------------------
    domain: tuple[float, ...] = (0.0, 1.0)
    epsilon: float = Field(default=1.0, gt=0)
    # budget_total, budget_window_seconds, release_period_seconds, release_mechanism,
    # max_changes_per_window: ReleaseSettings (release.py)
    pairs: tuple[PairKind, ...] = (PairKind.DISTRIBUTION_PRESENCE,)
    # kantorovich: the least noise whose per-release charge is exactly epsilon (docs/privacy.md,
    # "Which rule by default"); exact gives less noise per release but charges spread / theta.
    rule: Rule = Rule.KANTOROVICH
    prior_source: Literal["learned", "declared"] = "learned"
    priors_file: Path | None = None
    # Configured groups (besides those of priors_file); a join without a group goes to
    # default_group (default: the only configured group, if there is just one).
    groups: tuple[str, ...] = ()
    default_group: str | None = Field(default=None, min_length=1, max_length=128)
    # Learned priors (prior_source=learned): a user-level DP histogram per group every
    # learn_period_seconds, charged epsilon_learn on the same budget (docs/privacy.md).
    epsilon_learn: float = Field(default=0.1, gt=0)
    learn_period_seconds: float = Field(default=60.0, gt=0, le=86400 * 366)
    prior_floor: float = Field(default=0.05, ge=0, le=1)  # alpha: uniform weight mixed in
    learn_min_mass: float = Field(default=10.0, ge=0)  # noisy group mass (users) to re-learn
    # beta: a learned law's public radius holds with probability >= 1 - beta (core/robust.py)
    prior_confidence_beta: float = Field(default=1e-6, gt=0, lt=1)
    auto_join: bool = False
    # A report id is recognised as a duplicate while it is among the user's last
    # `dedup_window` accepted report ids (the per-user state holds at most that many ids).
    # 64 keeps a user's state under 1 KiB; it covers producer retries (crash and rebalance
    # replays are recognised by input offset: docs/design.md, "Per-user order").
    dedup_window: int = Field(default=64, ge=1, le=100_000)
    # A report of a user who has not joined is held in the user's state this long (the worker's
    # clock), applied at the join, else dead-lettered not_present (stream_app/domain/hold.py).
    join_grace_seconds: float = Field(default=30.0, ge=0, le=86400)
    max_held_reports_per_user: int = Field(default=64, ge=0, le=100_000)
    grid_log2: int = Field(default=-10, ge=-60, le=60)

    # --- serving (a port 0: the OS picks one when the server binds, written to ports_file) --
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(default=9102, ge=0, le=65535)  # None: no metrics server
    web_host: str = "127.0.0.1"
    web_port: int | None = Field(default=None, ge=0, le=65535)  # None: Faust web disabled
    ports_file: Path | None = None  # faust_adapter/ports_file.py; None: no file
    data_dir: Path = Path("pufferfish-data")
    store: StoreUrl = "memory://"  # or "rocksdb://" (settings/store.py)
    table_standby_replicas: int = Field(default=0, ge=0, le=8)  # RocksDB only
    max_payload_bytes: int = Field(default=4096, ge=64, le=1_048_576)
    # a dead letter's raw: null, or the record's first 256 bytes (values!) to re-send (privacy.md)
    deadletter_include_raw: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    # Bound on reading the releases journal at start-up (tansu's ListOffsets is off by one
    # batch, so the reader also waits for this much quiet before trusting the end).
    journal_quiet_seconds: float = Field(default=1.0, gt=0, le=60)
    # SIGTERM/SIGINT, or a write not acknowledged: the process ends within this many seconds,
    # even when the stop waits on a broker that is gone (faust_adapter/stop_deadline.py).
    shutdown_timeout_seconds: float = Field(default=10.0, gt=0, le=600)

    # --- broker-compat knobs (tansu: producer_max_batch_size=1, timeouts 6/6/1) -------------
    producer_max_batch_size: int = Field(default=16384, ge=1)
    broker_session_timeout: float = Field(default=60.0, gt=0)
    broker_rebalance_timeout: float = Field(default=60.0, gt=0)
    broker_heartbeat_interval: float = Field(default=3.0, gt=0)

    # --- input throughput (docs/design.md, "Throughput") ------------------------------------
    # The input agent applies records in batches of at most batch_max_events, waiting at most
    # batch_within_seconds for a batch to fill (the latency a record can wait under light load;
    # 0.2 s missed the release latency goal, bench/RESULTS.md section 5).
    batch_max_events: int = Field(default=10_000, ge=1, le=1_000_000)
    batch_within_seconds: float = Field(default=0.1, gt=0, le=60)
    # one changelog record per user per window, offsets committed after (design.md: write window)
    changelog_flush_seconds: float = Field(default=0.5, ge=0, le=60)
    # Producer linger (s): batches changelog and output records (+58 % on a real Kafka).
    # tansu: 0 with producer_max_batch_size=1 (its ListOffsets defect loses batched changelog
    # records on recovery).
    producer_linger_seconds: float = Field(default=0.01, ge=0, le=5)
    # How often Faust commits the input offsets a batch has acked (its broker_commit_interval):
    # a crash replays at most about this much input (recognised exactly: docs/design.md).
    broker_commit_interval_seconds: float = Field(default=2.8, gt=0, le=86400)
    # The worker's event loop: uvloop (faster) or Python's asyncio.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    # How long the broker may hold a fetch that finds nothing new (Faust's fixed 1.5 s). A real
    # Kafka answers as soon as a record arrives; tansu holds idle fetches this long: 0.1 there.
    consumer_fetch_max_wait_seconds: float = Field(default=1.5, gt=0, le=30)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = os.environ.get(CONFIG_FILE_ENV)
        if config_file:
            sources.append(JsonConfigSettingsSource(settings_cls, json_file=Path(config_file)))
        return tuple(sources)

    @field_validator("metrics_port", "web_port", "ports_file", mode="before")
    @classmethod
    def _port_off(cls, v: Any) -> Any:
        """``""``, ``none``, ``null`` or ``off`` (e.g. from an env var): no server, no file."""
        if isinstance(v, str) and v.strip().lower() in ("", "none", "null", "off"):
            return None
        return v

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, why in REMOVED.items():
                if name in data:
                    raise ValueError(f"{name}: {why}")
        return data

    @field_validator("rule")
    @classmethod
    def _stream_rule(cls, v: Rule) -> Rule:
        if v not in STREAM_RULES:
            raise ValueError(f"must be one of {', '.join(r.value for r in STREAM_RULES)}")
        return v

    @field_validator("domain", "pairs")
    @classmethod
    def _listed(cls, v: tuple[Any, ...], info: ValidationInfo) -> tuple[Any, ...]:
        if not v:
            raise ValueError(_EMPTY[str(info.field_name)])
        return v

    @field_validator("domain")
    @classmethod
    def _domain_sorted_distinct(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if not all(math.isfinite(x) for x in v):
            raise ValueError("values must be finite")
        if len(set(v)) != len(v):
            raise ValueError("values must be distinct")
        return tuple(sorted(v))

    @field_validator(
        "epsilon", "budget_total", "release_period_seconds", "epsilon_learn",
        "learn_period_seconds", "prior_floor", "learn_min_mass", "batch_within_seconds",
        "producer_linger_seconds", "changelog_flush_seconds",
    )
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be finite")
        return v

    @field_validator("pairs")
    @classmethod
    def _pairs_distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v))

    @field_validator("broker")
    @classmethod
    def _broker_url(cls, v: str) -> str:
        return broker_url.checked(v)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if not grid_contains(self.domain, self.grid_log2):
            raise ValueError(
                f"domain: every value must be a multiple of the noise grid 2**{self.grid_log2}"
                " (use a finer grid: a lower grid_log2)"
            )
        check_standbys(self.store, self.table_standby_replicas)
        if self.prior_source == "declared" and self.priors_file is None:
            raise ValueError("priors_file: required with prior_source=declared")
        if self.broker_security_protocol.startswith("SASL") and not self.sasl_username:
            raise ValueError("sasl_username: required with a SASL security protocol")
        return self

    # --- derived --------------------------------------------------------------------------
    @property
    def transactional_id(self) -> str:
        """The release owner's transactional id (``release_transactional_id``, else
        ``<app_id>-releaser``)."""
        return self.release_transactional_id or f"{self.app_id}-releaser"

    @property
    def bootstrap(self) -> str:
        """``host:port[,host:port]`` for aiokafka (the broker URL without its scheme)."""
        return broker_url.bootstrap(self.broker)
