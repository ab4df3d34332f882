"""Interrupts: the build process turns signals into exceptions it can clean up after, and
every worker process it starts ignores the terminal's Ctrl-C and dies with its parent.

A terminal sends SIGINT to the whole process group. Workers that took it themselves would
die mid-job, and their deaths would read as results (a compile "failed", a benchmark
"crashed"). So workers ignore SIGINT; the build process alone handles it, stops handing
out work, kills its workers and exits. Only a result a worker really produced is ever
recorded. A worker whose parent dies without cleaning up (SIGKILL) notices at once through
the parent's sentinel and exits, instead of compiling on for minutes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


class Terminated(BaseException):
    """SIGTERM or SIGHUP reached the build process (a BaseException, like KeyboardInterrupt,
    so that no ``except Exception`` records it as a failed result)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Within this block: the first Ctrl-C raises KeyboardInterrupt, a second one exits at
    once (cleanup is bounded, but a person may not want to wait for it); SIGTERM and
    SIGHUP raise ``Terminated``. Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = 0

    def on_int(signum: int, frame: FrameType | None) -> None:
        nonlocal seen
        seen += 1
        if seen > 1:
            os._exit(128 + signum)
        raise KeyboardInterrupt

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise Terminated(signum)

    wanted = {signal.SIGINT: on_int, signal.SIGTERM: on_term, signal.SIGHUP: on_term}
    previous: dict[signal.Signals, Any] = {}
    for signum, handler in wanted.items():
        # A SIGINT ignored by whoever started us (a background job of a script) stays so.
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def detach_worker() -> None:
    """In a worker process started with multiprocessing: ignore Ctrl-C (the parent handles
    it and stops this worker) and exit as soon as the parent process is gone.

    Ctrl-C is blocked as well as ignored: a library may install a SIGINT handler of its
    own (LLVM does when Triton compiles), and a caught signal is reset to the default at
    exec, so the processes a job starts (ptxas, g++) would die of a terminal's Ctrl-C and
    their deaths read as verdicts. A blocked signal stays blocked across fork and exec."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="aotc-parent-watch", daemon=True).start()
