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
