"""stream_app/tools/common.run_until_interrupted: Ctrl-C ends a tool even when a Kafka call it
abandoned ignores cancellation (asyncio.run would wait for that call for ever)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stream_app.tools import common

ROOT = Path(__file__).resolve().parents[3]

STUBBORN = """
import asyncio, sys
from stream_app.tools import common

async def deaf() -> None:  # like an aiokafka call stuck on a dead connection
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

async def main() -> None:
    asyncio.ensure_future(deaf())
    try:
        print("following", flush=True)
        await asyncio.sleep(3600)
    finally:
        print("finally ran", flush=True)

common.run_until_interrupted(main())
print("returned", flush=True)
"""


def test_ctrl_c_ends_the_tool_although_a_task_ignores_cancellation() -> None:
    proc = subprocess.Popen([sys.executable, "-c", STUBBORN], cwd=ROOT, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "following\n"
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=common.CLEANUP_GRACE_SECONDS + 20) == common.EXIT_OK
        assert time.monotonic() - started < common.CLEANUP_GRACE_SECONDS + 20
        out, err = proc.communicate()
        assert out == "finally ran\n" and err == ""  # ended at once: no "returned", no noise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_result_is_returned_and_the_loop_closed() -> None:
    async def main() -> int:
        await asyncio.sleep(0)
        return 7

    assert common.run_until_interrupted(main()) == 7


def test_an_error_is_raised_not_swallowed() -> None:
    async def main() -> None:
        raise ValueError("broker said no")

    with pytest.raises(ValueError, match="broker said no"):
        common.run_until_interrupted(main())
