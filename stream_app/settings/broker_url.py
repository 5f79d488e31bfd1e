"""The broker URL ``kafka://host:port[,host:port]``: checked with the settings, before any
connection attempt (a mistyped scheme or port would otherwise cost the whole broker timeout
and end as "not reachable")."""

from __future__ import annotations

BROKER_SCHEME = "kafka"
FORMAT = f"{BROKER_SCHEME}://host:port[,host:port]"


def problem(url: str) -> str:
    """What is wrong with ``url`` ("" if nothing)."""
    scheme, sep, hosts = url.partition("://")
    if not sep:
        return "no scheme"
    if scheme != BROKER_SCHEME:
        return f"unknown scheme {scheme!r}"
    for address in hosts.split(","):
        host, colon, port = address.rpartition(":")
        if not colon or not host or "/" in address:
            return f"{address!r} is not host:port"
        if not (port.isdigit() and 0 < int(port) < 65536):
            return f"port {port!r} is not a number in 1..65535"
    return ""


def checked(url: str) -> str:
    """``url``, or ValueError saying what is wrong (pydantic names the setting)."""
    found = problem(url)
    if found:
        raise ValueError(f"must be {FORMAT}, got {url!r} ({found})")
    return url


def bootstrap(url: str) -> str:
    """``host:port[,host:port]`` for aiokafka (the URL without its scheme)."""
    return url.split("://", 1)[1] if "://" in url else url
