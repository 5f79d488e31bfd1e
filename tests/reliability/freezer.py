"""Freeze a release owner at the moment that matters: ``python -m tests.reliability.freezer
DIR...`` watches the data directories with inotify (Linux, through ctypes) and SIGSTOPs the
process group of the first worker that creates a release intent's tmp file there
(``release-state-<topic>.json.<pid>.<thread>.tmp``, stream_app/release/local_state.py: written
after the journal fence and the draw, before the send). The stop counts only if the tmp file is
still there once the process is stopped (not yet renamed: the send has not happened); else the
process is resumed and the next intent awaited. It prints ``armed`` once the watches are in
place, then ``stopped <pid> <dir> <name> missed=<stops that came too late>`` and exits.

A process of its own, blocked in read(2): it wakes within microseconds of the create, where a
thread of the test process would wait for the GIL (the window between the intent and the send
is a few milliseconds). Nothing but the standard library: it starts fast.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import struct
import sys

IN_CREATE = 0x00000100
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then len bytes of name)
TMP = re.compile(r"^release-state-.*\.json\.(\d+)\.\d+\.tmp$")


def main(dirs: list[str]) -> int:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    watched = {}
    for d in dirs:
        wd = libc.inotify_add_watch(fd, os.fsencode(d), IN_CREATE)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
        watched[wd] = d
    print("armed", flush=True)
    missed = 0
    while True:
        data = os.read(fd, 64 * 1024)
        at = 0
        while at < len(data):
            wd, mask, _, length = EVENT.unpack_from(data, at)
            name = data[at + EVENT.size: at + EVENT.size + length].rstrip(b"\0").decode()
            at += EVENT.size + length
            found = TMP.match(name)
            if mask & IN_CREATE and found:
                pid = int(found.group(1))
                os.killpg(pid, signal.SIGSTOP)
                if not os.path.exists(os.path.join(watched[wd], name)):
                    # renamed before the stop landed (a busy machine): past the window, maybe
                    # past the send; let it go and wait for its next intent
                    os.killpg(pid, signal.SIGCONT)
                    missed += 1
                    continue
                print(f"stopped {pid} {watched[wd]} {name} missed={missed}", flush=True)
                return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
