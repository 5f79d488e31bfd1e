"""The release agent: journals, restore, the pause fence, learning rounds and releases."""

from stream_app.release.records import combine
from stream_app.release.releaser import Releaser

__all__ = ["Releaser", "combine"]
