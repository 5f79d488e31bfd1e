"""``python -m stream_app`` is the ``pufferfish`` command."""

from stream_app.cli import main

raise SystemExit(main())
