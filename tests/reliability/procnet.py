"""Listening TCP sockets of a process, read from /proc (no psutil)."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from pathlib import Path

TCP_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def _decode(addr: str, v6: bool) -> tuple[str, int]:
    host_hex, port_hex = addr.split(":")
    raw = bytes.fromhex(host_hex)
    if v6:
        # four little-endian 32-bit words
        words = struct.unpack("<4I", raw)
        host = str(ipaddress.IPv6Address(struct.pack(">4I", *words)))
    else:
        host = socket.inet_ntoa(struct.pack("<I", int(host_hex, 16)))
    return host, int(port_hex, 16)


def listening(pids: list[int]) -> list[tuple[str, int]]:
    """(host, port) of every LISTEN socket owned by any of `pids`."""
    inodes: set[str] = set()
    for pid in pids:
        inodes |= _socket_inodes(pid)
    found = []
    for table, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == TCP_LISTEN and cols[9] in inodes:
                found.append(_decode(cols[1], v6))
    return found


def descendants(pid: int) -> list[int]:
    """pid and all its descendants (walks /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out
