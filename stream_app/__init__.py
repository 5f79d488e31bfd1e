"""pufferfish-stream: the Faust service and its command line."""

__version__ = "0.1.0"  # the one place (pyproject.toml reads it: [tool.hatch.version])
