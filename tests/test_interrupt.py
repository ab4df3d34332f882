"""Interrupts never poison a cache or leave workers behind (a Ctrl-C to the process group,
SIGTERM or SIGKILL of the build): the build exits at once, writes nothing, records only
real verdicts, and the next build ships the bytes of a clean one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from aot.build import TuneOptions, build
from aot.tune.db import read
from aot.tune.gpu import GpuWorker
from tests import fakeserve
from tests.fakegpu import H100

from .conftest import env_for
from .test_golden import GOLDEN

ROOT = Path(__file__).resolve().parents[1]


def _records(cache: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in cache.glob("compile-v*/*/*.json")]


def _session_processes(sid: int) -> list[str]:
    """Processes of session ``sid`` still alive (zombies excluded), as 'pid command'."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            fields = text[text.rindex(")") + 2 :].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
                out.append(f"{stat.parent.name} {cmd.decode(errors='replace')[:120]}")
    return out


def _wait_gone(sid: int, seconds: float) -> list[str]:
    deadline = time.monotonic() + seconds
    while (left := _session_processes(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _start_build(cache: Path, out: Path, predict: str | None = None) -> subprocess.Popen[str]:
    """``aotc build recipes/example.toml`` in a session of its own (as a terminal's
    foreground job is), returned once it has cached its first compile; ``predict`` sets
    AOTC_PREDICT (else the suite's, tests/conftest.py)."""
    env = {**os.environ, "AOTC_CACHE_DIR": str(cache), "AOTC_JOBS": "2"}
    if predict is not None:
        env["AOTC_PREDICT"] = predict
    cmd = [sys.executable, "-m", "aot.cli", "build", "recipes/example.toml", "-o", str(out),
           "--no-progress", "--no-tune"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not _records(cache):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the build never started compiling: {proc.communicate()}")
        time.sleep(0.05)
    return proc


def _interrupt_and_check(
    proc: subprocess.Popen[str], how: str, code: int, message: str, cache: Path, out: Path
) -> None:
    """Interrupt the build ``how`` (ctrl-c, sigterm, sigkill); it must exit promptly with
    ``code`` and ``message``, no traceback, no process left, nothing written to ``out``'s
    folder, and no failure recorded in ``cache``."""
    if how == "ctrl-c":  # a terminal sends SIGINT to the whole foreground group
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=20)  # promptly, and no second Ctrl-C needed
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the build did not exit after {how}: {proc.communicate()}")
    assert proc.returncode == code, err
    assert message in err and "Traceback" not in err, err
    assert _wait_gone(proc.pid, 15) == []  # compile workers and resource tracker too
    assert not out.parent.exists() or list(out.parent.iterdir()) == []
    assert [r for r in _records(cache) if not r.get("ok")] == []


@pytest.mark.parametrize(
    ("how", "code", "message"),
    [
        ("ctrl-c", 130, "aotc: interrupted; nothing was written"),
        ("sigterm", 143, "aotc: stopped by SIGTERM; nothing was written"),
        ("sigkill", -9, ""),
    ],
)
def test_an_interrupted_build_records_no_failure_leaves_no_worker_and_heals(
    how: str, code: int, message: str, tmp_path: Path
) -> None:
    cache, out = tmp_path / "cache", tmp_path / "out" / "example.aotc"
    _interrupt_and_check(_start_build(cache, out), how, code, message, cache, out)
    # The next build from this cache ships exactly what a clean build does.
    build(ROOT / "recipes" / "example.toml", out, env_for(cache), tmp_path,
          TuneOptions(enabled=False, db=tmp_path / "none.jsonl"))  # fmt: skip
    assert hashlib.sha256(out.read_bytes()).hexdigest() == GOLDEN["example", None]


@pytest.mark.parametrize(
    ("how", "code", "message"),
    [
        ("ctrl-c", 130, "aotc: interrupted; nothing was written"),
        ("sigterm", 143, "aotc: stopped by SIGTERM; nothing was written"),
    ],
)
def test_an_interrupt_while_the_cost_model_compiles_its_shortlists_leaves_nothing(
    how: str, code: int, message: str, tmp_path: Path
) -> None:
    """The default build compiles the cost model's shortlists (its own compile processes)
    before it packs: an interrupt there exits as promptly, writes nothing, leaves no
    process and records no failure. (The heal check above runs the heuristic's build:
    a clean cost-model build of the example compiles for three minutes.)"""
    cache, out = tmp_path / "cache", tmp_path / "out" / "example.aotc"
    proc = _start_build(cache, out, predict="cost-model")
    _interrupt_and_check(proc, how, code, message, cache, out)


def test_an_interrupt_during_tuning_records_no_measurement_it_cut_short(
    recipe_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    marker = tmp_path / "hanging"
    monkeypatch.setenv("AOTC_TEST_MARKER", str(marker))
    # Python ignores SIGINT when it started ignoring it (a shell's `cmd &` job does):
    # Ctrl-C must raise KeyboardInterrupt here however the test run was started.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    db = tmp_path / "t.tunedb.jsonl"

    def interrupt_when_hanging() -> None:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaches the build's main thread

    opts = TuneOptions(
        db=db,
        gpus=[H100],
        worker_factory=lambda g: GpuWorker(g, timeout=600, serve=fakeserve.hang_after_three),
    )
    threading.Thread(target=interrupt_when_hanging, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        build(recipe_dir / "tune.toml", tmp_path / "t.aotc", env_for(tmp_path / "cache"),
              tmp_path, opts)  # fmt: skip
    stopped = time.monotonic()
    assert marker.exists()
    pid = int(marker.read_text())
    while time.monotonic() - stopped < 10:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the benchmark worker outlived the interrupted build")
    records = list(read(db))
    assert len(records) == 3 and all(r.ok for r in records)  # the fourth was cut short
    assert not (tmp_path / "t.aotc").exists()
