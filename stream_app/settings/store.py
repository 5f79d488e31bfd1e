"""The table store settings (docs/operations.md, "State on disk")."""

from __future__ import annotations

import importlib.util
from typing import Annotated

from pydantic import AfterValidator

STORES = ("memory://", "rocksdb://")  # Faust table stores


def checked_store(url: str) -> str:
    url = url.strip()
    if url not in STORES:
        raise ValueError(f"must be one of {', '.join(STORES)}")
    if url == "rocksdb://" and importlib.util.find_spec("rocksdict") is None:
        raise ValueError("rocksdb:// needs rocksdict: pip install 'pufferfish-stream[rocksdb]'")
    return url


def check_standbys(store: str, replicas: int) -> None:
    if replicas and store != "rocksdb://":
        raise ValueError('table_standby_replicas: needs store = "rocksdb://" (a memory store '
                         "drops the standby partitions it restores)")


StoreUrl = Annotated[str, AfterValidator(checked_store)]
