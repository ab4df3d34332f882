"""The builder's side of benchmarking: which GPUs are here, and a worker per GPU that is
restarted whenever a candidate kills it (a fault, a crash) or hangs past its timeout."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from ..targets import GPU

START_TIMEOUT = 180.0  # importing torch and creating a context on a cold machine


@dataclass(frozen=True)
class GpuInfo:
    ordinal: int
    name: str
    cc: tuple[int, int]

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


def detect() -> list[GpuInfo]:
    """GPUs visible to the CUDA driver, without importing torch or holding a context."""
    from loader import driver
    from loader.errors import CudaError

    try:
        drv = driver.get()
        count = drv.device_count()
    except (CudaError, OSError):
        return []
    out = []
    for i in range(count):
        dev = drv.device(i)
        cc = (drv.attribute(75, dev), drv.attribute(76, dev))
        out.append(GpuInfo(i, drv.device_name(dev), cc))
    return out


def device_matches(target: GPU, device: str, arch: str) -> bool:
    """A GPU (by driver name and arch) is of a target's kind: the target's product by name,
    or any GPU of an arch-only target's exact arch."""
    from loader.dispatch import name_match

    if arch != target.arch:
        return False
    return not target.device_names or name_match(target.to_target(), device) > 0


def matches(target: GPU, gpu: GpuInfo) -> bool:
    """Whether this GPU can tune ``target``."""
    return device_matches(target, gpu.name, gpu.arch)


class WorkerDied(Exception):
    pass


class GpuWorker:
    """One benchmark process on one GPU, started lazily and restarted after a fault."""

    def __init__(
        self,
        gpu: GpuInfo,
        *,
        timeout: float = 120.0,
        serve: Callable[[Connection, int], None] | None = None,
    ):
        self.gpu = gpu
        self.timeout = timeout
        self._serve = serve
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._killed = threading.Event()  # set by kill(), from another thread
        self.restarts = 0

    def _start(self) -> None:
        from .worker import serve

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        target = self._serve or serve
        proc = ctx.Process(target=target, args=(child, self.gpu.ordinal), daemon=True)
        proc.start()
        child.close()
        if not parent.poll(START_TIMEOUT):
            proc.kill()
            raise WorkerDied(f"benchmark worker on GPU {self.gpu.ordinal} did not start")
        hello = parent.recv()
        if not hello.get("ok"):
            proc.join(5)
            raise WorkerDied(hello.get("reason", "benchmark worker failed to start"))
        self._proc, self._conn = proc, parent

    def _stop(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(10)
        self._proc = self._conn = None

    def request(self, msg: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one request; a dead, faulted or hung worker becomes a failed result, but
        one ``kill``ed meanwhile raises ``WorkerDied``: that death says nothing of the
        candidate."""
        if self._killed.is_set():
            raise WorkerDied(f"the benchmark worker on GPU {self.gpu.ordinal} was stopped")
        if self._conn is None:
            self._start()
        assert self._conn is not None and self._proc is not None
        limit = self.timeout if timeout is None else timeout
        started = time.monotonic()
        try:
            self._conn.send(msg)
            if not self._conn.poll(limit):
                self._stop()
                self.restarts += 1
                return {"ok": False, "reason": f"hang: no result after {limit:.0f}s (killed)",
                        "fatal": True}  # fmt: skip
            reply: dict[str, Any] = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            if self._killed.is_set():
                stopped = f"the benchmark worker on GPU {self.gpu.ordinal} was stopped"
                raise WorkerDied(stopped) from None
            # The pipe closes a moment before the process is reaped: wait for its exit code.
            self._proc.join(5)
            code = self._proc.exitcode
            self._stop()
            self.restarts += 1
            return {"ok": False, "fatal": True,
                    "reason": f"benchmark worker died (exit code {code}) after "
                              f"{time.monotonic() - started:.1f}s"}  # fmt: skip
        if reply.get("fatal"):
            self._stop()
            self.restarts += 1
        return reply

    def kill(self) -> None:
        """Stop the worker now, from any thread; a request under way raises WorkerDied."""
        self._killed.set()
        proc = self._proc
        if proc is not None and proc.is_alive():
            proc.kill()

    def close(self) -> None:
        if self._killed.is_set():
            self._stop()
            return
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send({"op": "quit"})
        if self._proc is not None:
            self._proc.join(10)
        self._stop()
