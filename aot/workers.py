"""Worker processes for the build's compile jobs: Triton variants (aot/compile.py) and
model buckets (aot/model/compile.py) alike.

Each worker is a spawned process (the build process may hold CUDA) that runs one job at a
time, placed where its jobs must run: a ``Placement`` is the environment it starts with,
such as ``CUDA_VISIBLE_DEVICES`` for a model bucket that autotunes on one GPU of its own.
In the build process one thread per worker hands it jobs from one queue, in the order
they were submitted, and settles each job's future.

- Workers ignore Ctrl-C, and so do the processes they start (ptxas, g++): a terminal
  sends it to the whole process group, and the build handles it and stops them; dying of
  it, a worker or its compiler would turn an interrupt into a result.
- Workers die with the build, whatever kills it: they watch the build process's sentinel
  (``signals.detach_worker``) and, on Linux, the kernel sends them SIGTERM when the thread
  that started them ends (``PR_SET_PDEATHSIG``).
- ``abort`` kills every worker at once and cancels every job; a pool left by an exception
  (Ctrl-C included) aborts.
- A worker that dies during a job fails that job alone, with ``WorkerDied``: ``crashed``
  tells a crash (an exit status, or a fatal signal such as SIGSEGV: the job's own doing)
  from a kill from outside (SIGKILL from the OOM killer, SIGTERM) and from a worker that
  could not start. The next job gets a fresh worker.
- The pool records nothing. A job's result or exception reaches its future as it is, and
  the caller stores only what it judges a real verdict.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any, TypeVar

from .signals import detach_worker

T = TypeVar("T")

# Signals that mean the job crashed its worker (a verdict on the job), as opposed to a
# worker killed from outside (SIGKILL by the OOM killer, SIGTERM, SIGHUP).
CRASHES = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE})
LOG_LINES = 15  # of a dead worker's output, in its error
_CAUSES = ("unreachable", "assert", "error")  # words of a line that says why a compiler died
_READY = "ready"


@dataclass(frozen=True)
class Placement:
    """Where a worker runs. ``label`` names it in messages; ``env`` is set in the worker
    before anything runs there (before torch or Triton is imported)."""

    label: str = "cpu"
    env: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def on(device: str) -> Placement:
        """A worker for one torch device: ``cuda:N`` sees that GPU alone, as its
        ``cuda:0`` (``local_device``); ``cpu`` shares the machine."""
        if device.startswith("cuda:"):
            return Placement(device, {"CUDA_VISIBLE_DEVICES": device.split(":", 1)[1]})
        return Placement(device)


def local_device(device: str) -> str:
    """``device`` as a worker placed ``Placement.on(device)`` names it."""
    return "cuda:0" if device.startswith("cuda") else device


class WorkerDied(Exception):
    """The worker running a job ended before it answered."""

    def __init__(self, placement: Placement, exitcode: int, log: str = "", started: bool = True):
        self.placement = placement
        self.exitcode = exitcode
        self.log = log  # the end of its output, when the pool captures it
        self.started = started  # False: it died before it could take a job
        super().__init__(f"the worker on {placement.label} ended ({self.how})")

    @property
    def last_words(self) -> str:
        """The line of its output that says why (an LLVM ``UNREACHABLE``, a failed
        assertion, an error), else its last line; at most 300 characters."""
        lines = [ln.strip() for ln in self.log.splitlines() if ln.strip()]
        why = [ln for ln in lines if any(w in ln.lower() for w in _CAUSES)]
        return (why or lines or [""])[-1][:300]

    @property
    def crashed(self) -> bool:
        """The job's own doing: the worker exited with a status, or a fatal signal such as
        SIGSEGV ended it. Not a kill from outside, nor a worker that never started."""
        code = self.exitcode
        return self.started and (code > 0 or -code in CRASHES)

    @property
    def how(self) -> str:
        """``exit status 1``, ``SIGSEGV``, or ``no answer`` (it exited 0 without one)."""
        code = self.exitcode
        if code > 0:
            return f"exit status {code}"
        if code < 0:
            try:
                return signal.Signals(-code).name
            except ValueError:
                return f"signal {-code}"
        return "no answer"


@dataclass(frozen=True)
class _Task:
    future: cf.Future[Any]
    fn: Callable[..., Any]
    args: tuple[Any, ...]


def _die_with_parent() -> None:
    """Linux: SIGTERM when the thread that started this worker ends (a time limit's
    signal to the build alone would otherwise leave it compiling); elsewhere the parent's
    sentinel alone (``detach_worker``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it crosses the connection back as itself (an exception whose
    ``__init__`` takes other arguments than its ``args`` does not), else a RuntimeError
    that says what it was."""
    try:
        ForkingPickler.loads(ForkingPickler.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _worker_main(
    conn: Connection, env: Mapping[str, str], init: Callable[..., None] | None,
    init_args: tuple[Any, ...], log: str | None,
) -> None:  # fmt: skip
    """A worker: set up, say it is ready, then run jobs until told to stop."""
    os.environ.update(env)
    if log is not None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    detach_worker()  # Ctrl-C blocked and ignored, here and in what jobs start
    _die_with_parent()
    if init is not None:
        init(*init_args)
    conn.send((_READY,))
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the build process is gone
            return
        except Exception as exc:  # a job that cannot be unpickled here is no crash
            conn.send(("raise", RuntimeError(f"the job cannot be received: {exc!r}"), ""))
            continue
        if task is None:
            return
        if log is not None:  # the log holds this job's output alone: a crash's tail is its own
            os.ftruncate(2, 0)
        fn, args = task
        try:
            reply: tuple[Any, ...] = ("ok", fn(*args))
        except Exception as exc:  # the job's error goes to its future
            reply = ("raise", _portable(exc), traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # a result that cannot be sent
            conn.send(("raise", RuntimeError(f"the job's result cannot be sent: {exc}"), ""))


class _Worker:
    """One worker process, started on its first job and again after it dies."""

    def __init__(self, placement: Placement, init: Callable[..., None] | None,
                 init_args: tuple[Any, ...], log: bool):  # fmt: skip
        self.placement = placement
        self._init, self._init_args, self._log = init, init_args, log
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._log_path: str | None = None
        self._lock = threading.Lock()
        self._killed = False

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The job's reply, ``("ok", value)`` or ``("raise", exc, traceback)``; raises
        ``WorkerDied`` if the worker ends first."""
        if self._conn is None:
            self._start()
        assert self._conn is not None
        try:
            self._conn.send((fn, args))
        except (OSError, ValueError):  # it died between jobs: not this job's doing
            self._reap(started=False)
            self._start()
            assert self._conn is not None
            self._conn.send((fn, args))
        return self._receive(started=True)

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        with self._lock:
            if self._killed:
                raise WorkerDied(self.placement, -signal.SIGKILL, started=False)
            if self._log and self._log_path is None:
                fd, self._log_path = tempfile.mkstemp(prefix="aotc-worker-", suffix=".log")
                os.close(fd)
            mine, theirs = ctx.Pipe()
            args = (theirs, dict(self.placement.env), self._init, self._init_args, self._log_path)
            process = ctx.Process(target=_worker_main, args=args,
                                  name=f"aotc-worker {self.placement.label}")  # fmt: skip
            process.start()  # kept only once started: kill() has nothing to do otherwise
            self._process = process
            theirs.close()
            self._conn = mine
        self._receive(started=False)

    def _receive(self, started: bool) -> tuple[Any, ...]:
        assert self._conn is not None and self._process is not None
        conn = self._conn
        multiprocessing.connection.wait([conn, self._process.sentinel])
        if conn.poll():
            with contextlib.suppress(EOFError, OSError):
                reply: tuple[Any, ...] = conn.recv()
                return reply
        raise self._reap(started)

    def _reap(self, started: bool) -> WorkerDied:
        """The dead worker's account; the next job starts a fresh one."""
        assert self._process is not None
        died = WorkerDied(self.placement, _exitcode(self._process), self._tail(), started)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None
        return died

    def _tail(self) -> str:
        if self._log_path is None:
            return ""
        text = Path(self._log_path).read_text(errors="replace")
        return "\n".join(text.strip().splitlines()[-LOG_LINES:])

    def stop(self) -> None:
        """Tell the worker to exit after its job, and wait for it."""
        if self._conn is not None and self._process is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
            self._process.join(10)
        self.kill()
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._log_path)

    def kill(self) -> None:
        """Kill the worker now; no job starts on it after this."""
        with self._lock:
            self._killed = True
            process = self._process
        if process is not None and process.exitcode is None:
            with contextlib.suppress(OSError, ValueError):
                process.kill()
            process.join(5)


def _exitcode(process: BaseProcess) -> int:
    """The dead process's exit code. When ``kill`` (another thread) reaps it at the same
    moment, this thread's ``waitpid`` finds no child and ``exitcode`` stays None until the
    other thread records what it reaped: wait for that, rather than read a kill as a
    clean exit ("no answer")."""
    process.join()
    deadline = time.monotonic() + 5
    while process.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return process.exitcode or 0


class WorkerPool:
    """Runs jobs (a picklable module-level function and its arguments) on one worker per
    placement, in the order submitted. Use it as a context manager: leaving it normally
    waits for the jobs under way; leaving it by an exception aborts it."""

    def __init__(
        self, placements: Sequence[Placement], *, init: Callable[..., None] | None = None,
        init_args: tuple[Any, ...] = (), log: bool = False,
    ) -> None:  # fmt: skip
        """``init(*init_args)`` runs once in each worker before its first job; ``log``
        captures each worker's output, whose end ``WorkerDied`` carries."""
        self._workers = [_Worker(p, init, init_args, log) for p in placements]
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._done = False

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def submit(self, fn: Callable[..., T], *args: Any) -> cf.Future[T]:
        """Queue ``fn(*args)``; a closed or aborted pool cancels it."""
        fut: cf.Future[T] = cf.Future()
        with self._lock:
            if self._done:
                fut.cancel()
                return fut
            if not self._threads:
                for w in self._workers:
                    t = threading.Thread(target=self._serve, args=(w,), daemon=True,
                                         name=f"aotc-pool {w.placement.label}")  # fmt: skip
                    t.start()
                    self._threads.append(t)
            self._tasks.put(_Task(fut, fn, args))
        return fut

    def _serve(self, worker: _Worker) -> None:
        try:
            while (task := self._tasks.get()) is not None:
                if task.future.set_running_or_notify_cancel():
                    self._run(worker, task)
        finally:
            worker.stop()

    def _run(self, worker: _Worker, task: _Task) -> None:
        try:
            reply = worker.run(task.fn, task.args)
        except BaseException as exc:  # WorkerDied, or a job that could not be sent
            task.future.set_exception(exc)
            return
        if reply[0] == "ok":
            task.future.set_result(reply[1])
        else:
            error: BaseException = reply[1]
            if reply[2]:
                error.add_note(reply[2])  # the worker's traceback
            task.future.set_exception(error)

    def _finish(self) -> None:
        """No more jobs: cancel those not started, and let each thread end."""
        with self._lock:
            self._done = True
        while True:
            try:
                task = self._tasks.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task.future.cancel()
        for _ in self._threads:
            self._tasks.put(None)

    def close(self) -> None:
        """Cancel the jobs not started, wait for those under way, stop the workers."""
        self._finish()
        for t in self._threads:
            t.join()

    def abort(self) -> None:
        """Stop now: cancel the jobs not started and kill every worker (the jobs they ran
        end with ``WorkerDied``)."""
        self._finish()
        for w in self._workers:
            w.kill()
        for t in self._threads:
            t.join(10)
