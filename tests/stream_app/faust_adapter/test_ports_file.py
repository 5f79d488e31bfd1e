"""The ports file (stream_app/faust_adapter/ports_file.py): what a worker that binds port 0
reports, and what a reader takes from it."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from stream_app.faust_adapter.ports_file import PortsFile, listening_socket, reported_port


def test_start_replaces_an_earlier_processs_file_before_any_port_is_known(
        tmp_path: Path) -> None:
    path = tmp_path / "ports.json"
    path.write_text(json.dumps({"pid": os.getpid() + 1, "metrics": 9102, "web": 6066}))
    ports = PortsFile(path)
    ports.start()
    assert json.loads(path.read_text()) == {"pid": os.getpid()}
    assert reported_port(path, "metrics", os.getpid()) is None


def test_each_server_is_added_as_it_listens(tmp_path: Path) -> None:
    path = tmp_path / "ports.json"
    ports = PortsFile(path)
    ports.start()
    ports.listening("metrics", 40001)
    assert reported_port(path, "metrics", os.getpid()) == 40001
    assert reported_port(path, "web", os.getpid()) is None
    ports.listening("web", 40002)
    assert json.loads(path.read_text()) == {"pid": os.getpid(), "metrics": 40001, "web": 40002}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ports.json"]  # no temporary left


def test_a_reader_never_takes_another_processs_ports(tmp_path: Path) -> None:
    path = tmp_path / "ports.json"
    path.write_text(json.dumps({"pid": 12345, "metrics": 40001}))
    assert reported_port(path, "metrics", 12345) == 40001
    assert reported_port(path, "metrics", 54321) is None
    assert reported_port(path, "metrics", None) == 40001  # a path only one process writes to


@pytest.mark.parametrize("text", ["", "{", "[1]", '{"pid": 7, "metrics": 0}',
                                  '{"pid": 7, "metrics": "40001"}'])
def test_a_missing_partial_or_foreign_file_reports_nothing(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ports.json"
    assert reported_port(path, "metrics", 7) is None  # no file yet
    path.write_text(text)
    assert reported_port(path, "metrics", 7) is None


def test_no_path_writes_nothing(tmp_path: Path) -> None:
    ports = PortsFile(None)
    ports.start()
    ports.listening("metrics", 40001)
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_path_fails_at_start(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        PortsFile(tmp_path / "missing" / "ports.json").start()


def test_port_0_listens_on_a_port_the_os_picked() -> None:
    with listening_socket("127.0.0.1", 0) as server:
        host, port = server.getsockname()[:2]
        assert host == "127.0.0.1" and port > 0
        with socket.create_connection((host, port), timeout=5):
            pass  # it accepts: it listens

