"""Loading the settings for a command (`run`, `plan`): one PufferfishInputError per problem."""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from pufferfish_core.errors import PufferfishInputError
from stream_app.settings.model import CONFIG_FILE_ENV, REMOVED, Settings

# PUFFERFISH_* variables that are not settings: the CI harness's and the test script's own
NOT_SETTINGS = frozenset({CONFIG_FILE_ENV, "PUFFERFISH_CI_RUN", "PUFFERFISH_TEST_WORKERS"})
ENV_PREFIX = "PUFFERFISH_"


def without_settings(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """``environ`` without its settings (``PUFFERFISH_*`` and the config file): what a process
    this one starts inherits before it gets settings of its own. Markers that are not settings
    stay (``PUFFERFISH_CI_RUN``: .ci/run stops whatever a test left running by it)."""
    kept = NOT_SETTINGS - {CONFIG_FILE_ENV}
    return {k: v for k, v in environ.items()
            if not k.upper().startswith(ENV_PREFIX) or k.upper() in kept}


def unknown_setting(name: str, known: Iterable[str]) -> str:
    """The message for a name that is not a setting, with the closest one if any is close."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
    return "unknown setting" + (f"; did you mean {close[0]}?" if close else "")


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """A ``PUFFERFISH_*`` variable that names no setting is an error (a typo would otherwise
    leave the default in force without a word)."""
    names = {ENV_PREFIX + f.upper() for f in Settings.model_fields}
    for key in sorted(environ):
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or upper in names or upper in NOT_SETTINGS:
            continue
        removed = REMOVED.get(upper.removeprefix(ENV_PREFIX).lower())
        raise PufferfishInputError(key, removed or unknown_setting(upper, names))


def check_config_file(path: str, named_by: str) -> None:
    """The config file ``path`` (named by ``named_by``: --config or PUFFERFISH_CONFIG_FILE)
    exists and reads as UTF-8 JSON holding one object; else ONE PufferfishInputError. pydantic's
    JSON source would take a missing file for an empty one: the defaults, without a word."""
    where = f"{path} (from {named_by})"
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except FileNotFoundError:
        raise PufferfishInputError("config", f"no such file: {where}") from None
    except IsADirectoryError:
        raise PufferfishInputError("config", f"is a directory: {where}") from None
    except OSError as exc:
        raise PufferfishInputError("config", f"cannot read {where}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise PufferfishInputError(
            "config", f"not UTF-8 text (byte {exc.start}): {where}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PufferfishInputError(
            "config", f"not valid JSON ({exc.msg}, line {exc.lineno}): {where}") from None
    except (ValueError, RecursionError):
        raise PufferfishInputError("config", f"not valid JSON: {where}") from None
    if not isinstance(doc, dict):
        raise PufferfishInputError(
            "config", f"must hold one JSON object of settings, not {type(doc).__name__}: {where}")


def _validation_message(exc: ValidationError) -> tuple[str, str]:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err.get("loc", ())) or "settings"
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":  # a key of the config file
        msg = unknown_setting(field, Settings.model_fields)
    if not err.get("loc") and ":" in msg:
        field, msg = (part.strip() for part in msg.split(":", 1))
    return field, msg


def load_settings(config: str | None = None, overrides: Mapping[str, Any] = {}) -> Settings:  # noqa: B006
    """Settings from the environment and an optional JSON file; every problem is ONE
    PufferfishInputError naming the field (the CLI prints it as one line, exit 2)."""
    check_environment()
    if config:
        os.environ[CONFIG_FILE_ENV] = config
    if os.environ.get(CONFIG_FILE_ENV):
        check_config_file(os.environ[CONFIG_FILE_ENV], "--config" if config else CONFIG_FILE_ENV)
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise PufferfishInputError(*_validation_message(exc)) from None
    except SettingsError as exc:
        found = re.search(r'field "([^"]+)"', str(exc))
        raise PufferfishInputError(
            found.group(1) if found else "settings",
            "cannot parse the value (lists and objects are JSON)",
        ) from None
