"""Stand-in worker processes for testing the supervisor (aot/tune/gpu.py) on the CPU."""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection


def serve(conn: Connection, ordinal: int) -> None:
    """Behaves according to each request's ``op``: ok, crash, hang, fault, or quit."""
    conn.send({"ok": True, "device": f"fake{ordinal}", "pid": os.getpid()})
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        op = msg["op"]
        if op == "quit":
            return
        if op == "crash":
            os._exit(11)  # like a segfault in the driver
        if op == "hang":
            time.sleep(3600)
        if op == "fault":
            conn.send(
                {"ok": False, "fatal": True, "reason": "CUDA error: an illegal memory access"}
            )
            os._exit(3)
        conn.send({"ok": True, "pid": os.getpid()})


def broken(conn: Connection, ordinal: int) -> None:
    conn.send({"ok": False, "fatal": True, "reason": "worker start failed: no CUDA GPU"})


def hang_after_three(conn: Connection, ordinal: int) -> None:
    """Answers three benchmark requests, then hangs in the fourth, after writing its pid to
    the file named by ``AOTC_TEST_MARKER`` (a test then interrupts the build)."""
    conn.send({"ok": True, "device": f"fake{ordinal}", "pid": os.getpid()})
    answered = 0
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg["op"] == "quit":
            return
        if answered == 3:
            with open(os.environ["AOTC_TEST_MARKER"], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(3600)
        answered += 1
        conn.send({"ok": True, "ms": 1.0 + answered, "samples": [1.0 + answered],
                   "error": 0.0, "tolerance": 1e-3})  # fmt: skip
