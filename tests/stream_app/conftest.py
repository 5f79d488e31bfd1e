"""Fixtures shared by the stream_app tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PUFFERFISH_* variable from the caller's environment reaches the settings."""
    # setenv first so that teardown also removes a PUFFERFISH_CONFIG_FILE set by the code
    monkeypatch.setenv("PUFFERFISH_CONFIG_FILE", "unused")
    for name in list(os.environ):
        if name.startswith("PUFFERFISH_"):
            monkeypatch.delenv(name)
