"""A node journal in a local file (JSON lines, fsync'd per append): the reference
implementation of ``NodeJournal`` (stream_app/release/tree.py) for one host. A deployment whose
release owner can move needs the journal in Kafka (docs/design.md, "Continual release: wiring
the tree"): an internal topic with the same records. The file holds raw noise: keep it with the
operator, like ``data_dir``'s other files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from stream_app.release.tree import NodeDraw


class FileNodeJournal:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def read(self, window: int) -> list[NodeDraw]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                draw = NodeDraw(**json.loads(line))
            except (ValueError, TypeError):
                continue  # a line torn by a crash mid-append was never acknowledged
            if draw.window == window:
                out.append(draw)
        return out

    async def append(self, draws: Sequence[NodeDraw]) -> None:
        text = "".join(json.dumps(asdict(d), sort_keys=True) + "\n" for d in draws)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._torn():
            text = "\n" + text  # keep a torn last line from swallowing the next record
        with self.path.open("a", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def _torn(self) -> bool:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return False
        with self.path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
