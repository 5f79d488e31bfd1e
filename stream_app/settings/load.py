"""Loading the settings for a command (`run`, `plan`): one PufferfishInputError per problem."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from core.errors import PufferfishInputError
from stream_app.settings.model import CONFIG_FILE_ENV, Settings


def _validation_message(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err.get("loc", ())) or "settings"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if not err.get("loc") and ":" in msg:
        field, msg = (part.strip() for part in msg.split(":", 1))
    return field, msg


def load_settings(config: str | None = None, overrides: Mapping[str, Any] = {}) -> Settings:  # noqa: B006
    """Settings from the environment and an optional JSON file; every problem is ONE
    PufferfishInputError naming the field (the CLI prints it as one line, exit 2)."""
    if config:
        if not os.path.isfile(config):
            raise PufferfishInputError("config", f"no such file: {config}")
        os.environ[CONFIG_FILE_ENV] = config
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise PufferfishInputError(*_validation_message(exc)) from None
    except json.JSONDecodeError as exc:
        raise PufferfishInputError(
            "config", f"not valid JSON ({exc.msg}, line {exc.lineno})"
        ) from None
    except SettingsError as exc:
        found = re.search(r'field "([^"]+)"', str(exc))
        raise PufferfishInputError(
            found.group(1) if found else "settings",
            "cannot parse the value (lists and objects are JSON)",
        ) from None
