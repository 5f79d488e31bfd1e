"""Operator tools on the topics: ``pufferfish send`` (JSONL in) and ``pufferfish tail`` (out)."""
