"""The committed contract files (deploy/schemas/) and validators for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = REPO / "deploy" / "schemas"
TOPICS = ("reports", "membership", "releases", "priors", "deadletter")
REGENERATE = "run: pufferfish schema --out deploy/schemas (and commit the result)"


def load(name: str) -> Any:
    return json.loads((SCHEMAS / name).read_text(encoding="ascii"))


def validator(topic: str) -> Draft7Validator:
    """A draft-07 validator of the committed schema of ``topic`` (the schema itself checked)."""
    schema = load(f"{topic}.schema.json")
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema)


def errors(topic: str, document: Any) -> list[str]:
    return [e.message for e in validator(topic).iter_errors(document)]
