"""Kafka client options from the settings: one place for TLS and SASL (aiokafka and Faust)."""

from __future__ import annotations

import ssl
from typing import Any

from stream_app.settings import Settings

# Every consumer of the project (the worker's Faust consumer: faust_adapter/isolation.py;
# `pufferfish tail`, the demo's view) reads committed records only: the records of an aborted
# transaction are never counted nor shown.
ISOLATION_LEVEL = "read_committed"
# Except the release owner's own journals (releases, priors, tree nodes: journal.py): whatever
# reached their log counts as published, aborted or not, since a reader with READ on the topic
# chooses its isolation level (docs/privacy.md, "Two concurrent release owners").
JOURNAL_ISOLATION_LEVEL = "read_uncommitted"

# what to do when the broker cannot be reached (the errors of run, send and tail end with it)
UNREACHABLE_HINT = ("is it running? Start it, or set --broker / PUFFERFISH_BROKER to a broker "
                    "that runs (--timeout waits longer)")


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if "SSL" not in settings.broker_security_protocol:
        return None
    from aiokafka.helpers import create_ssl_context

    ctx: ssl.SSLContext = create_ssl_context(
        cafile=str(settings.ssl_cafile) if settings.ssl_cafile else None,
        certfile=str(settings.ssl_certfile) if settings.ssl_certfile else None,
        keyfile=str(settings.ssl_keyfile) if settings.ssl_keyfile else None,
    )
    return ctx


def aiokafka_kwargs(settings: Settings) -> dict[str, Any]:
    """Connection/security keyword arguments for aiokafka clients."""
    kw: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "security_protocol": settings.broker_security_protocol,
    }
    ctx = ssl_context(settings)
    if ctx is not None:
        kw["ssl_context"] = ctx
    if settings.broker_security_protocol.startswith("SASL"):
        kw["sasl_mechanism"] = settings.sasl_mechanism
        kw["sasl_plain_username"] = settings.sasl_username
        kw["sasl_plain_password"] = (
            settings.sasl_password.get_secret_value() if settings.sasl_password else None
        )
    return kw


def consumer_kwargs(settings: Settings) -> dict[str, Any]:
    """aiokafka_kwargs for an AIOKafkaConsumer: committed records only."""
    return {**aiokafka_kwargs(settings), "isolation_level": ISOLATION_LEVEL}


def journal_consumer_kwargs(settings: Settings) -> dict[str, Any]:
    """aiokafka_kwargs for the release owner's journal readers: every record in the log,
    aborted ones included (JOURNAL_ISOLATION_LEVEL)."""
    return {**aiokafka_kwargs(settings), "isolation_level": JOURNAL_ISOLATION_LEVEL}


def faust_credentials(settings: Settings) -> Any:
    """Credentials object for ``faust.App(broker_credentials=...)`` or None."""
    import faust

    ctx = ssl_context(settings)
    if settings.broker_security_protocol.startswith("SASL"):
        return faust.SASLCredentials(
            username=settings.sasl_username,
            password=settings.sasl_password.get_secret_value() if settings.sasl_password else None,
            ssl_context=ctx,
            mechanism=settings.sasl_mechanism,
        )
    if ctx is not None:
        return faust.SSLCredentials(ctx)
    return None
