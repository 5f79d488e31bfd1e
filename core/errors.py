"""The exception root of the product, and its one type for bad input.

Every exception core raises derives from ``PufferfishError``, so a caller can catch the
product's errors apart from Python's own. Bad input is ``PufferfishInputError`` (also a
ValueError), whatever module refuses it; the checks themselves live in core/validation.py.
"""

from __future__ import annotations


class PufferfishError(Exception):
    """Root of every exception the product raises on purpose."""


class PufferfishInputError(PufferfishError, ValueError):
    """Bad input. ``field`` names the offending field; the message starts with it."""

    field: str

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def __reduce__(self) -> tuple[type[PufferfishInputError], tuple[str, str]]:
        return (type(self), (self.field, self.message))
