"""The release agent: journals, restore, the pause fence, learning rounds and releases."""

from stream_app.release.releaser import Releaser, combine

__all__ = ["Releaser", "combine"]
