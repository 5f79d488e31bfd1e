"""The local budget file: exact round trip, atomic replace, corrupt file names the field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pufferfish_core.budget import Accountant
from pufferfish_core.errors import PufferfishInputError
from stream_app.domain.models import Release
from stream_app.release.local_state import LocalState, load_state, save_state, state_path
from stream_app.settings import Settings

REPO = Path(__file__).resolve().parents[3]


def _release(seq: int, spent: float) -> Release:
    return Release(seq=seq, ts=1.5, noisy_sum=2.25, theta=0.5, epsilon=0.1, epsilon_spent=spent,
                   epsilon_remaining=1.0 - spent, pairs=["value_presence"], rule="exact")


def _state(n: int) -> LocalState:
    acc = Accountant(1.0)
    for _ in range(n):
        acc.spend(0.1)
    return LocalState(n, acc, _release(n, acc.spent) if n else None)


def test_round_trip_is_exact(tmp_path: Path) -> None:
    path = tmp_path / "d" / "state.json"
    assert load_state(path) is None
    save_state(path, _state(10))
    got = load_state(path)
    assert got is not None and got.last_seq == 10
    # ten charges of 0.1 fill 1.0 exactly (no float drift): nothing more can be spent
    assert got.accountant.remaining == 0.0 and not got.accountant.can_spend(1e-9)
    assert got.accountant.charges == [0.1] * 10
    assert got.last_release == _release(10, 1.0)
    assert not (path.parent / "state.json.tmp").exists()
    save_state(path, _state(0))
    again = load_state(path)
    assert again is not None and again.last_seq == 0 and again.last_release is None


def test_path_is_per_releases_topic(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path, topic_releases="a/b c", metrics_port=None)
    assert state_path(s) == tmp_path / "release-state-a_b_c.json"


def _corrupt(tmp_path: Path, edit: object) -> PufferfishInputError:
    path = tmp_path / "state.json"
    save_state(path, _state(3))
    if isinstance(edit, str):
        path.write_text(edit)
    else:
        data = json.loads(path.read_text())
        edit(data)  # type: ignore[operator]
        path.write_text(json.dumps(data))
    with pytest.raises(PufferfishInputError) as info:
        load_state(path)
    assert str(path) in str(info.value)
    return info.value


@pytest.mark.parametrize(("edit", "field"), [
    ("{not json", "release_state.file"),
    ("[]", "release_state.file"),
    (lambda d: d.update(format=2), "release_state.format"),
    (lambda d: d.update(last_seq=-1), "release_state.last_seq"),
    (lambda d: d.update(last_seq="3"), "release_state.last_seq"),
    (lambda d: d.update(last_seq=4), "release_state.last_release.seq"),
    (lambda d: d["accountant"].update(spent_exact="1/10"), "release_state.accountant.spent_exact"),
    (lambda d: d["accountant"].update(spent=0.1), "release_state.accountant.spent"),
    (lambda d: d["accountant"].pop("charges"), "release_state.accountant.charges"),
    (lambda d: d.pop("accountant"), "release_state.accountant.budget"),
    (lambda d: d["last_release"].update(theta=-1), "release_state.last_release.theta"),
])
def test_corrupt_file_names_the_field(tmp_path: Path, edit: object, field: str) -> None:
    assert _corrupt(tmp_path, edit).field == field


def test_worker_refuses_to_start_on_a_corrupt_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    save_state(data_dir / "release-state-releases.json", _state(2))
    path = data_dir / "release-state-releases.json"
    doc = json.loads(path.read_text())
    doc["accountant"]["charges"] = [0.1]
    path.write_text(json.dumps(doc))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUFFERFISH_")}
    env.update({"PUFFERFISH_DATA_DIR": str(data_dir), "PUFFERFISH_METRICS_PORT": "off",
                "PUFFERFISH_BROKER": "kafka://127.0.0.1:1", "PYTHONPATH": str(REPO)})
    proc = subprocess.run([sys.executable, "-m", "stream_app", "run"], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("pufferfish: error: release_state.accountant.releases: ")
