"""The worker pool that compiles Triton variants and model buckets (aot/workers.py): jobs
run where they are placed, a job's error reaches its future, a crash is told from a kill
from outside and from a worker that could not start, a dead worker is replaced, workers
ignore Ctrl-C, and an abort kills them at once."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from aot.compile import KILLED, CompilePool
from aot.errors import RecipeError
from aot.workers import Placement, WorkerDied, WorkerPool, local_device


def where() -> tuple[str | None, int]:
    return os.environ.get("AOTC_TEST_PLACE"), os.getpid()


def fail_with(exc: Exception) -> None:
    raise exc


def fail_oddly() -> None:
    raise RecipeError("r.toml", "[model]", "changed on disk")


def die(how: str) -> None:
    print("last words", flush=True)
    if how == "abort":
        os.abort()
    if how == "exit":
        os._exit(3)
    os.kill(os.getpid(), signal.SIGKILL)


def interrupted() -> str:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)
    return "still here"


def start_a_child_and_interrupt_it() -> int:
    """What a terminal's Ctrl-C does to a process a job started (ptxas, g++), after a
    library installed a SIGINT handler of its own in the worker, as LLVM does when Triton
    compiles: the child's exit status."""
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    child = subprocess.Popen(["sleep", "2"])
    time.sleep(0.3)
    os.kill(child.pid, signal.SIGINT)
    return child.wait()


def sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def broken_init() -> None:
    raise ImportError("no triton here")


def test_jobs_run_in_their_placement_in_order() -> None:
    with WorkerPool([Placement("a", {"AOTC_TEST_PLACE": "a"})]) as pool:
        futures = [pool.submit(where) for _ in range(3)]
        got = [f.result(timeout=60) for f in futures]
    assert {g[0] for g in got} == {"a"} and len({g[1] for g in got}) == 1  # one worker
    assert os.environ.get("AOTC_TEST_PLACE") is None
    assert Placement.on("cuda:3") == Placement("cuda:3", {"CUDA_VISIBLE_DEVICES": "3"})
    assert Placement.on("cpu") == Placement("cpu") and local_device("cuda:3") == "cuda:0"


def test_a_jobs_error_reaches_its_future_and_the_worker_goes_on() -> None:
    with WorkerPool([Placement()]) as pool:
        with pytest.raises(ValueError, match="bad value") as e:
            pool.submit(fail_with, ValueError("bad value")).result(timeout=60)
        assert any("fail_with" in note for note in e.value.__notes__)  # the worker's traceback
        # an exception that cannot cross back as itself arrives as a RuntimeError naming it
        with pytest.raises(RuntimeError, match=r"RecipeError: r.toml: \[model\]: changed"):
            pool.submit(fail_oddly).result(timeout=60)
        # and so do arguments that cannot be unpickled there
        odd = RecipeError("r.toml", "[model]", "changed on disk")
        with pytest.raises(RuntimeError, match="the job cannot be received: TypeError"):
            pool.submit(fail_with, odd).result(timeout=60)
        assert pool.submit(where).result(timeout=60)[0] is None


@pytest.mark.parametrize(
    ("how", "crashed", "ended"),
    [("abort", True, "SIGABRT"), ("exit", True, "exit status 3"), ("kill", False, "SIGKILL")],
)
def test_a_dead_worker_fails_its_job_alone_and_is_replaced(
    how: str, crashed: bool, ended: str
) -> None:
    with WorkerPool([Placement("cpu")], log=True) as pool:
        first = pool.submit(where).result(timeout=60)[1]
        with pytest.raises(WorkerDied) as e:
            pool.submit(die, how).result(timeout=60)
        assert e.value.crashed is crashed and e.value.how == ended and e.value.started
        assert "last words" in e.value.log
        assert str(e.value) == f"the worker on cpu ended ({ended})"
        again = pool.submit(where).result(timeout=60)[1]
    assert again != first


def say_then_die(words: str) -> None:
    os.write(2, words.encode() + b"\n")
    os.abort()


def test_a_dead_workers_log_holds_its_last_job_alone() -> None:
    with WorkerPool([Placement("cpu")], log=True) as pool:
        pool.submit(os.write, 2, b"an earlier job's output\n").result(timeout=60)
        with pytest.raises(WorkerDied) as e:
            pool.submit(say_then_die, "UNREACHABLE executed at Pass.cpp:12!").result(timeout=60)
    assert e.value.log == "UNREACHABLE executed at Pass.cpp:12!"


def test_a_worker_that_cannot_start_is_no_crash() -> None:
    with (
        WorkerPool([Placement()], init=broken_init, log=True) as pool,
        pytest.raises(WorkerDied) as e,
    ):
        pool.submit(where).result(timeout=60)
    assert not e.value.started and not e.value.crashed
    assert "ImportError: no triton here" in e.value.log


def test_a_process_that_fails_to_spawn_leaves_nothing_to_kill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # multiprocessing refuses to spawn from a script without an `if __name__ ==
    # "__main__":` guard; the job fails with that error, and stopping the pool afterwards
    # must not trip over a process that never started (it raised AttributeError).
    import multiprocessing.process

    def refuse(self: object) -> None:
        raise RuntimeError("An attempt has been made to start a new process before ...")

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refuse)
    pool = WorkerPool([Placement()])
    with pytest.raises(RuntimeError, match="start a new process"):
        pool.submit(where).result(timeout=60)
    pool.abort()  # kills what was started: nothing


def test_workers_ignore_ctrl_c() -> None:
    with WorkerPool([Placement()]) as pool:
        assert pool.submit(interrupted).result(timeout=60) == "still here"


def test_processes_a_job_starts_ignore_ctrl_c_too() -> None:
    """A handler installed in the worker is reset to the default at exec, so a child would
    die of Ctrl-C, and its death read as the compiler's verdict (a cached failure); a
    blocked signal stays blocked across fork and exec."""
    with WorkerPool([Placement()]) as pool:
        assert pool.submit(start_a_child_and_interrupt_it).result(timeout=60) == 0


def test_abort_kills_the_workers_and_cancels_what_did_not_start() -> None:
    pool = WorkerPool([Placement()])
    running = pool.submit(sleep, 120)
    waiting = pool.submit(sleep, 120)
    while not running.running():
        time.sleep(0.01)
    time.sleep(1)  # the worker is up and sleeping
    start = time.monotonic()
    pool.abort()
    with pytest.raises(WorkerDied) as e:
        running.result(timeout=30)
    assert e.value.how == "SIGKILL" and not e.value.crashed
    assert waiting.cancelled() and time.monotonic() - start < 20
    assert pool.submit(where).cancelled()


def test_an_aborted_pool_leaves_no_worker_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(KeyboardInterrupt), WorkerPool([Placement()] * 2, log=True) as pool:
        jobs = [pool.submit(sleep, 120) for _ in range(2)]
        while not all(j.running() for j in jobs):
            time.sleep(0.01)
        assert len(list(tmp_path.glob("aotc-worker-*.log"))) == 2
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())


def test_leaving_the_pool_by_an_exception_aborts_it() -> None:
    with pytest.raises(KeyboardInterrupt), WorkerPool([Placement()]) as pool:
        job = pool.submit(sleep, 120)
        while not job.running():
            time.sleep(0.01)
        raise KeyboardInterrupt
    with pytest.raises(WorkerDied):
        job.result(timeout=30)


def _settled(exc: BaseException) -> cf.Future[dict[str, object]]:
    f: cf.Future[dict[str, object]] = cf.Future()
    f.set_exception(exc)
    return f


def test_compile_pool_caches_a_compiler_crash_and_nothing_else(tmp_path: Path) -> None:
    """A Triton compiler that crashes its worker is a verdict on the variant (cached, as a
    failure); a worker killed from outside or one that never started is none."""
    from aot.cache import CompileCache

    pool = CompilePool(None, CompileCache(tmp_path), 1)  # type: ignore[arg-type]
    crash = pool._verdict(_settled(WorkerDied(Placement(), -signal.SIGSEGV)))
    assert crash == {"ok": False, "reason": "the Triton compiler crashed (SIGSEGV)"}
    # what the compiler said last, picked out of its IR dump
    log = "module {\n  tt.func @k() {\n}\nUNREACHABLE executed at WSDataPartition.cpp:1205!\n}"
    said = pool._verdict(_settled(WorkerDied(Placement(), -signal.SIGABRT, log=log)))
    assert said == {
        "ok": False,
        "reason": "the Triton compiler crashed (SIGABRT): "
        "UNREACHABLE executed at WSDataPartition.cpp:1205!",
    }
    killed, unborn = (
        WorkerDied(Placement(), -signal.SIGKILL),
        WorkerDied(Placement(), 1, started=False),
    )
    for died in (killed, unborn):
        verdict = pool._verdict(_settled(died))
        assert verdict is not None and verdict[KILLED] and not verdict["ok"]
