"""Kafka security settings reach the clients; the SASL password never shows up in text.

Config level (no SASL broker is available here): Settings from PUFFERFISH_* env / JSON file ->
the Faust app's broker_credentials -> the kwargs Faust hands to aiokafka, and the kwargs the
worker's own aiokafka clients (topic setup, releases journal, release producer) use. Then a real
worker is started with SASL against the plaintext test broker: whatever it logs at DEBUG while
failing must not contain the password.
"""

from __future__ import annotations

import base64
import json
import os
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import faust
import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from stream_app.demo.broker import EmbeddedBroker
from stream_app.kafka.clients import aiokafka_kwargs, faust_credentials
from stream_app.settings import Settings
from tests.reliability.harness import (
    Worker,
    new_topics,
    worker_env,
)
from tests.waiting import wait_for

# module-scoped fixtures below: one worker process runs this module (tests/conftest.py)
pytestmark = pytest.mark.xdist_group("test_security_config")

PASSWORD = "Pw-9zQ-s3cr3t-Xy7"
USER = "svc-pufferfish"
SASL_REFUSED = re.compile(r"Sasl\w*Error")  # aiokafka: UnsupportedSaslMechanismError


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=pufferfish-test-ca", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )
    return {"cafile": cert, "certfile": cert, "keyfile": key}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.startswith("PUFFERFISH_"):
            monkeypatch.delenv(name)
    yield monkeypatch


def _sasl_ssl_env(mp: pytest.MonkeyPatch, tls: dict[str, Path], password_in_env: bool = True
                  ) -> None:
    mp.setenv("PUFFERFISH_BROKER", "kafka://127.0.0.1:9093")
    mp.setenv("PUFFERFISH_BROKER_SECURITY_PROTOCOL", "SASL_SSL")
    mp.setenv("PUFFERFISH_SASL_MECHANISM", "SCRAM-SHA-512")
    mp.setenv("PUFFERFISH_SASL_USERNAME", USER)
    if password_in_env:
        mp.setenv("PUFFERFISH_SASL_PASSWORD", PASSWORD)
    mp.setenv("PUFFERFISH_SSL_CAFILE", str(tls["cafile"]))
    mp.setenv("PUFFERFISH_SSL_CERTFILE", str(tls["certfile"]))
    mp.setenv("PUFFERFISH_SSL_KEYFILE", str(tls["keyfile"]))


def _ca_subjects(ctx: ssl.SSLContext) -> list[str]:
    return [str(c.get("subject")) for c in ctx.get_ca_certs()]


def _assert_sasl_ssl_auth(auth: dict[str, object]) -> None:
    assert auth["security_protocol"] == "SASL_SSL"
    assert auth["sasl_mechanism"] == "SCRAM-SHA-512"
    assert auth["sasl_plain_username"] == USER
    assert auth["sasl_plain_password"] == PASSWORD
    ctx = auth["ssl_context"]
    assert isinstance(ctx, ssl.SSLContext)
    assert any("pufferfish-test-ca" in s for s in _ca_subjects(ctx)), "CA file not loaded"
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname


def test_sasl_ssl_reaches_faust_and_aiokafka(clean_env: pytest.MonkeyPatch,
                                             tls_files: dict[str, Path]) -> None:
    _sasl_ssl_env(clean_env, tls_files)
    settings = Settings()
    creds = faust_credentials(settings)
    assert isinstance(creds, faust.SASLCredentials)
    _assert_sasl_ssl_auth(dict(credentials_to_aiokafka_auth(creds)))
    _assert_sasl_ssl_auth(aiokafka_kwargs(settings))


def test_worker_app_carries_the_credentials(clean_env: pytest.MonkeyPatch,
                                            tls_files: dict[str, Path], tmp_path: Path) -> None:
    from stream_app.faust_adapter.worker import PufferfishApp

    _sasl_ssl_env(clean_env, tls_files)
    clean_env.setenv("PUFFERFISH_DATA_DIR", str(tmp_path))
    worker_app = PufferfishApp(Settings())
    creds = worker_app.app.conf.broker_credentials
    assert isinstance(creds, faust.SASLCredentials)
    _assert_sasl_ssl_auth(dict(credentials_to_aiokafka_auth(creds)))
    # the release path has its own aiokafka clients: they must use the same security settings
    _assert_sasl_ssl_auth(aiokafka_kwargs(worker_app.releaser.settings))


def test_password_from_json_config_file(clean_env: pytest.MonkeyPatch,
                                        tls_files: dict[str, Path], tmp_path: Path) -> None:
    _sasl_ssl_env(clean_env, tls_files, password_in_env=False)
    cfg = tmp_path / "worker.json"
    cfg.write_text(json.dumps({"sasl_password": PASSWORD}))
    cfg.chmod(0o600)
    clean_env.setenv("PUFFERFISH_CONFIG_FILE", str(cfg))
    _assert_sasl_ssl_auth(aiokafka_kwargs(Settings()))


def test_ssl_only_and_plaintext(clean_env: pytest.MonkeyPatch,
                                tls_files: dict[str, Path]) -> None:
    assert faust_credentials(Settings()) is None
    assert aiokafka_kwargs(Settings())["security_protocol"] == "PLAINTEXT"
    clean_env.setenv("PUFFERFISH_BROKER_SECURITY_PROTOCOL", "SSL")
    clean_env.setenv("PUFFERFISH_SSL_CAFILE", str(tls_files["cafile"]))
    creds = faust_credentials(Settings())
    assert isinstance(creds, faust.SSLCredentials)
    auth = dict(credentials_to_aiokafka_auth(creds))
    assert auth["security_protocol"] == "SSL"
    assert any("pufferfish-test-ca" in s for s in _ca_subjects(auth["ssl_context"]))


def test_settings_text_forms_hide_the_password(clean_env: pytest.MonkeyPatch,
                                               tls_files: dict[str, Path]) -> None:
    _sasl_ssl_env(clean_env, tls_files)
    s = Settings()
    forms = [repr(s), str(s), s.model_dump_json(), json.dumps(s.model_dump(mode="json")),
             str(s.model_dump()), repr(s.sasl_password), f"{s}", f"{s!r}"]
    for text in forms:
        assert PASSWORD not in text


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_worker_start_up_log_never_contains_the_password(
    broker_module: EmbeddedBroker, tmp_path: Path, tls_files: dict[str, Path]
) -> None:
    # SASL_PLAINTEXT: the plaintext test broker answers the SASL handshake (and refuses it),
    # so the worker gets as far as authenticating -- the moment a careless log would print it.
    protocol = "SASL_PLAINTEXT"
    topics = new_topics(broker_module.bootstrap, 1)
    env = worker_env(broker_module.url, topics, tmp_path / "data", {
        "PUFFERFISH_BROKER_SECURITY_PROTOCOL": protocol,
        "PUFFERFISH_SASL_MECHANISM": "PLAIN",
        "PUFFERFISH_SASL_USERNAME": USER,
        "PUFFERFISH_SASL_PASSWORD": PASSWORD,
        "PUFFERFISH_SSL_CAFILE": str(tls_files["cafile"]),
        "PUFFERFISH_LOG_LEVEL": "debug",
    })
    worker = Worker(env, tmp_path, f"sasl-{protocol}").start()
    # The broker refuses the SASL handshake: wait until the worker tried (and retried) it, the
    # moment a careless log would print the password, or gave up and exited.
    try:
        wait_for(lambda: not worker.alive() or len(SASL_REFUSED.findall(worker.output())) >= 2,
                 90, "two refused SASL handshakes in the worker log (or its exit)", 0.5)
    finally:
        code = worker.stop()
    text = worker.output()
    assert text.strip(), "the worker printed nothing at DEBUG level"
    encoded = [PASSWORD, base64.b64encode(PASSWORD.encode()).decode(),
               base64.b64encode(f"\0{USER}\0{PASSWORD}".encode()).decode(), PASSWORD.encode().hex()]
    for needle in encoded:
        assert needle not in text, f"password ({needle}) in worker output"
    if code not in (None, 0, -15):
        # exiting is fine if it says why in one line, without a traceback
        assert "pufferfish: error:" in text and "Traceback" not in text, text[-2000:]


def test_servers_bind_loopback_unless_configured(clean_env: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """Defaults: metrics and Faust web on 127.0.0.1; another address needs an explicit setting.
    (test_leaks.py checks the sockets of real worker processes.)"""
    from stream_app.faust_adapter.worker import PufferfishApp

    clean_env.setenv("PUFFERFISH_DATA_DIR", str(tmp_path))
    s = Settings(web_port=6067)
    assert s.metrics_host == "127.0.0.1" and s.web_host == "127.0.0.1"
    conf = PufferfishApp(s).app.conf
    assert conf.web_bind == "127.0.0.1" and conf.web_enabled
    clean_env.setenv("PUFFERFISH_WEB_HOST", "0.0.0.0")
    assert PufferfishApp(Settings(web_port=6067)).app.conf.web_bind == "0.0.0.0"
