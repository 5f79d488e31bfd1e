"""Tests of pufferfish send and pufferfish tail (stream_app/tools)."""
