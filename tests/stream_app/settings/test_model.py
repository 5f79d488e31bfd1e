"""Settings: env vars, JSON file, validation messages, secrets (no broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from stream_app.kafka.clients import aiokafka_kwargs, faust_credentials
from stream_app.settings import Settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("PUFFERFISH_"):
            monkeypatch.delenv(name)


def test_defaults_bind_loopback_and_the_charge_epsilon_rule() -> None:
    s = Settings()
    assert s.metrics_host == "127.0.0.1" and s.web_host == "127.0.0.1" and s.web_port is None
    assert s.rule == "kantorovich" and s.prior_source == "learned"
    assert s.bootstrap == "127.0.0.1:9092"


def test_env_and_json_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"epsilon": 0.5, "domain": [2, 0, 1], "input_partitions": 3}))
    monkeypatch.setenv("PUFFERFISH_CONFIG_FILE", str(cfg))
    monkeypatch.setenv("PUFFERFISH_INPUT_PARTITIONS", "2")  # env beats the file
    monkeypatch.setenv("PUFFERFISH_PAIRS", '["value_presence", "value_change"]')
    s = Settings()
    assert s.epsilon == 0.5 and s.domain == (0.0, 1.0, 2.0) and s.input_partitions == 2
    assert s.pairs == ("value_presence", "value_change")


def test_servers_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUFFERFISH_METRICS_PORT", "off")
    assert Settings().metrics_port is None
    assert Settings(web_port="none").web_port is None
    monkeypatch.setenv("PUFFERFISH_PORTS_FILE", "off")
    assert Settings().ports_file is None


def test_port_0_lets_the_os_pick_and_the_ports_file_says_which(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUFFERFISH_METRICS_PORT", "0")
    monkeypatch.setenv("PUFFERFISH_WEB_PORT", "0")
    monkeypatch.setenv("PUFFERFISH_PORTS_FILE", "/run/pufferfish/ports.json")
    s = Settings()
    assert (s.metrics_port, s.web_port) == (0, 0)
    assert s.ports_file == Path("/run/pufferfish/ports.json")
    assert Settings(ports_file="").ports_file is None  # not Path("") (the working directory)
    with pytest.raises(ValidationError, match="web_port"):
        Settings(web_port=-1)


def test_secret_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PUFFERFISH_SASL_PASSWORD", "hunter2")
    s = Settings(broker_security_protocol="SASL_PLAINTEXT", sasl_username="me")
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.model_dump())
    assert aiokafka_kwargs(s)["sasl_plain_password"] == "hunter2"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"domain": [0.1]}, "noise grid"),
        ({"domain": []}, "at least one"),
        ({"domain": [1, 1]}, "distinct"),
        ({"epsilon": 0}, "epsilon"),
        ({"pairs": ["bogus"]}, "pairs"),
        ({"prior_source": "declared"}, "priors_file"),
        ({"epsilon_learn": 0}, "epsilon_learn"),
        ({"epsilon_learn": -1}, "epsilon_learn"),
        ({"prior_floor": -0.1}, "prior_floor"),
        ({"prior_floor": 1.5}, "prior_floor"),
        ({"learn_period_seconds": 0}, "learn_period_seconds"),
        ({"rule": "binary"}, "rule"),
        ({"release_every_events": 5}, "release_every_events"),
        ({"max_held_reports": 100}, "one user's held reports"),
        ({"budget_window_seconds": 0}, "budget_window_seconds"),
        ({"budget_window_seconds": -5}, "budget_window_seconds"),
        ({"budget_window_seconds": 5, "release_period_seconds": 10}, "budget_window_seconds"),
        ({"release_mechanism": "tree"}, "budget_window_seconds: required"),
        ({"release_mechanism": "binary"}, "release_mechanism"),
        ({"max_changes_per_window": -1}, "max_changes_per_window"),
        ({"broker": "kafka://nohostport"}, "broker"),
        ({"surprise": 1}, "surprise"),
        ({"rule": "magic"}, "rule"),
        ({"store": "redis://"}, "must be one of memory://, rocksdb://"),
        ({"table_standby_replicas": 1}, 'table_standby_replicas: needs store = "rocksdb://"'),
        ({"table_standby_replicas": -1, "store": "rocksdb://"}, "table_standby_replicas"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(**kwargs)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_release_mechanism_defaults_and_tree() -> None:
    s = Settings()
    assert (s.release_mechanism, s.max_changes_per_window) == ("independent", 4)
    tree = Settings(release_mechanism="tree", budget_window_seconds=3600, max_changes_per_window=0)
    assert (tree.release_mechanism, tree.max_changes_per_window) == ("tree", 0)


def test_grid_check_depends_on_grid() -> None:
    assert Settings(domain=[0.25, 1.5], grid_log2=-2).domain == (0.25, 1.5)
    with pytest.raises(ValidationError, match="noise grid"):
        Settings(domain=[0.25, 1.5], grid_log2=-1)


def test_security_settings_reach_both_clients(tmp_path: Path) -> None:
    import faust

    s = Settings(broker="kafka://h1:9093,h2:9093", broker_security_protocol="SASL_SSL",
                 sasl_mechanism="SCRAM-SHA-512", sasl_username="svc", sasl_password="pw")
    kw = aiokafka_kwargs(s)
    assert kw["bootstrap_servers"] == "h1:9093,h2:9093"
    assert kw["security_protocol"] == "SASL_SSL" and kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "svc" and kw["ssl_context"] is not None
    cred = faust_credentials(s)
    assert isinstance(cred, faust.SASLCredentials) and cred.username == "svc"
    assert cred.ssl_context is not None
    plain = Settings()
    assert faust_credentials(plain) is None and "ssl_context" not in aiokafka_kwargs(plain)
    assert isinstance(faust_credentials(Settings(broker_security_protocol="SSL")),
                      faust.SSLCredentials)


def test_rocksdb_store_with_standbys() -> None:
    s = Settings(store=" rocksdb://", table_standby_replicas=1)
    assert (s.store, s.table_standby_replicas) == ("rocksdb://", 1)


def test_rocksdb_store_without_rocksdict_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "rocksdict" else real(name, *a))
    with pytest.raises(ValidationError, match=r"pip install 'pufferfish-stream\[rocksdb\]'"):
        Settings(store="rocksdb://")
