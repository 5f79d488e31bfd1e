"""The release agent's local high-water mark: accountant, last seqs and a record, in data_dir.

Written (tmp file + fsync + rename + fsync of the directory) BEFORE a release is sent, as an
intent: the charge and the seq are recorded before anyone can see the value, so a crash at
any point leaves a file that counts at least every release the journal can hold. A seq named
here is never drawn again (its value may or may not have reached the journal). On restore the
releaser takes the max over this file and the releases journal, so losing either one alone
never lowers epsilon_spent or reuses a seq. A file that cannot be parsed is a start-up error
naming the field, never a silent reset.

Size: the accountant keeps every charge (exact bookkeeping), so the file grows by about 20
bytes per release and is rewritten on every release; budget_total / epsilon bounds the count.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pufferfish_core.budget import Accountant
from pufferfish_core.errors import PufferfishInputError
from stream_app.domain.models import Release
from stream_app.settings import Settings

FORMAT = 1
FIELD = "release_state"


@dataclass
class LocalState:
    last_seq: int
    accountant: Accountant
    last_release: Release | None = None
    last_priors_seq: int = 0  # learning rounds: a round seq named here is never drawn again
    window: int | None = None  # the privacy window the accountant belongs to (None: no windows)


def state_path(settings: Settings) -> Path:
    """One file per releases topic (the budget belongs to the journal it protects)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", settings.topic_releases)
    return Path(settings.data_dir) / f"release-state-{safe}.json"


def _error(path: Path, field: str, message: str) -> PufferfishInputError:
    return PufferfishInputError(f"{FIELD}.{field}", f"{message} (file {path}; fix or restore it, "
                                "never delete it to reset the budget)")


def load_state(path: Path) -> LocalState | None:
    """The stored state, None when there is no file; PufferfishInputError when it is corrupt."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _error(path, "file", f"cannot be read ({type(exc).__name__})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _error(path, "file", f"not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise _error(path, "file", "must be a JSON object")
    if data.get("format") != FORMAT:
        raise _error(path, "format", f"must be {FORMAT}, got {data.get('format')!r}")
    seq = data.get("last_seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise _error(path, "last_seq", f"must be an integer >= 0, got {seq!r}")
    try:
        accountant = Accountant.from_dict(data.get("accountant"))  # type: ignore[arg-type]
    except PufferfishInputError as exc:
        raise _error(path, f"accountant.{exc.field}", exc.message) from None
    raw_release = data.get("last_release")
    release = None
    if raw_release is not None:
        try:
            release = Release.model_validate(raw_release)
        except ValidationError as exc:
            loc = ".".join(str(p) for p in exc.errors()[0].get("loc", ()))
            raise _error(path, f"last_release.{loc}", "invalid") from None
        if release.seq != seq:
            raise _error(path, "last_release.seq", f"must equal last_seq ({seq})")
    priors_seq = data.get("last_priors_seq", 0)
    if isinstance(priors_seq, bool) or not isinstance(priors_seq, int) or priors_seq < 0:
        raise _error(path, "last_priors_seq", f"must be an integer >= 0, got {priors_seq!r}")
    if seq == 0 and priors_seq == 0 and accountant.releases > 0:
        raise _error(path, "last_seq", "is 0 but the accountant holds charges")
    window = data.get("window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)):
        raise _error(path, "window", f"must be an integer or null, got {window!r}")
    return LocalState(seq, accountant, release, priors_seq, window)


def save_state(path: Path, state: LocalState) -> None:
    """Atomically replace the file (tmp + fsync + rename + directory fsync)."""
    payload: dict[str, Any] = {
        "format": FORMAT,
        "last_seq": state.last_seq,
        "last_priors_seq": state.last_priors_seq,
        "window": state.window,
        "accountant": state.accountant.to_dict(),
        "last_release": (
            state.last_release.model_dump(mode="json") if state.last_release else None
        ),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # a name of this writer's own: workers that share data_dir may save at the same moment
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, allow_nan=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def merged(mine: LocalState | None, on_disk: LocalState | None) -> LocalState | None:
    """The file may have been written by another worker sharing data_dir: keep the max."""
    if mine is None or on_disk is None:
        return mine or on_disk
    newer_window = (on_disk.window or 0) > (mine.window or 0)
    more = on_disk.window == mine.window and on_disk.accountant.spent > mine.accountant.spent
    best = on_disk if newer_window or more else mine
    return LocalState(max(mine.last_seq, on_disk.last_seq), best.accountant, best.last_release,
                      max(mine.last_priors_seq, on_disk.last_priors_seq), best.window)
