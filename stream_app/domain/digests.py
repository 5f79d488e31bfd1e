"""Report-id digests: how a user's state remembers its recent report ids (dedup).

Dedup ids are kept as 64-bit digests of the report ids. A genuine new report is dropped as a
duplicate only if its digest equals one of the (at most dedup_window) digests kept for its
user: probability <= dedup_window / 2**64 per report (3.5e-18 at 64; over 10**12 reports the
expected number of such drops is 3.5e-6). docs/design.md, "Throughput".
"""

from __future__ import annotations

import binascii
import hashlib
import struct
from collections.abc import Sequence
from typing import Any

DIGEST_BYTES = 8


def digest_bytes(report_id: str) -> bytes:
    """The 8 bytes of a report id's digest (blake2b: stable across processes and versions)."""
    return hashlib.blake2b(report_id.encode("utf-8", "surrogatepass"),
                           digest_size=DIGEST_BYTES).digest()


def report_digest(report_id: str) -> int:
    """The 64-bit digest of a report id: ``digest_bytes`` as a little-endian integer."""
    return int.from_bytes(digest_bytes(report_id), "little")


def pack_ids(ids: Sequence[int]) -> bytes:
    """Digests -> their packed bytes (8 per id, little-endian)."""
    return struct.pack(f"<{len(ids)}Q", *ids)


def unpack_ids(blob: bytes | bytearray) -> tuple[int, ...]:
    """Packed bytes -> the digests."""
    return struct.unpack(f"<{len(blob) // DIGEST_BYTES}Q", blob)


def ids_text(blob: bytes | bytearray) -> str:
    """Packed digests -> one base64 string (the state's JSON field ``ids``)."""
    return binascii.b2a_base64(blob, newline=False).decode("ascii")  # b64encode, unwrapped


def stored_ids(doc: dict[str, Any]) -> bytes:
    """A stored document's digests as their packed bytes."""
    if "ids" not in doc:  # an older version's list of report-id strings
        return b"".join(digest_bytes(str(r)) for r in doc.get("recent_ids", ()))
    raw = binascii.a2b_base64(doc["ids"])  # base64.b64decode(text), without its Python wrapper
    if len(raw) % DIGEST_BYTES:
        raise ValueError("stored ids are not whole 8-byte digests")
    return raw


def holds(blob: bytes | bytearray, digest: bytes) -> bool:
    """Whether one of the packed digests in ``blob`` is ``digest`` (aligned matches only)."""
    i = blob.find(digest)
    while i >= 0:
        if i % DIGEST_BYTES == 0:
            return True
        i = blob.find(digest, i + 1)
    return False
