"""The one exception type for bad input anywhere in the product."""

from __future__ import annotations


class PufferfishInputError(ValueError):
    """Bad input. ``field`` names the offending field; the message starts with it."""

    field: str

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")

    def __reduce__(self) -> tuple[type[PufferfishInputError], tuple[str, str]]:
        return (type(self), (self.field, self.message))
