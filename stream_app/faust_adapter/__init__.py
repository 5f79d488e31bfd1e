"""The Faust adapter: every Faust, mode and aiokafka internal the worker touches lives here
(pinned in pyproject.toml; the canary tests/stream_app/faust_adapter/test_faust_canary.py)."""
