"""A model's buckets compiled by several processes at once, one per local device of the
target's kind (``python -m aot.model_pool JOB`` is one of them).

A bucket of an AOTInductor model costs about 100 s on an H200: autotuning on the GPU, then
a C++ build on the CPU. Buckets are independent, so N GPUs of a kind build N at a time.
Each worker sees one GPU (``CUDA_VISIBLE_DEVICES``), because autotuning measures kernels
and two processes timing on one GPU would disturb each other. On the CPU the workers
share the machine (``--model-workers N``).

Workers hand results back through the compile cache: each verified bucket is stored under
the same key the parent computes (the key leaves out which GPU of the kind built it), and
the parent then packs every bucket from the cache, exactly as it packs a rebuild. A worker
that fails stops the others; its error becomes the build's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from .cache import CompileCache
from .errors import BuildError
from .recipe import load

ERROR_PREFIX = "aotc-model-worker-error: "


Job = tuple[tuple[int, ...], str]  # (bucket, Inductor mode): one compilation


def deal(jobs: Sequence[Job], n: int) -> list[list[Job]]:
    """``jobs`` split into ``n`` shares of about equal work: the largest first, each to the
    share with the least so far (the cost of a job taken as its bucket's element count)."""
    shares: list[list[Job]] = [[] for _ in range(n)]
    load = [0] * n
    for j in sorted(jobs, key=lambda j: math.prod(j[0]), reverse=True):
        i = load.index(min(load))
        shares[i].append(j)
        load[i] += math.prod(j[0])
    return [s for s in shares if s]


def compile_in_workers(
    recipe_path: Path, place: Any, devices: Sequence[str], jobs: Sequence[Job],
    keys: dict[Job, str], cache: CompileCache, done: Callable[[Job], None],
) -> None:  # fmt: skip
    """Compile ``jobs`` into ``cache`` with one worker per device; ``done(job)`` is called
    as each lands. Raises ``BuildError`` with the first failing worker's message, after
    stopping the others."""
    assert cache.root is not None
    workers: list[tuple[subprocess.Popen[bytes], IO[bytes], str]] = []
    waiting = {keys[j]: j for j in jobs}
    with contextlib.ExitStack() as stack:
        stack.callback(_stop, workers)
        for device, share in zip(devices, deal(jobs, len(devices)), strict=False):
            env = dict(os.environ)
            local = device
            if device.startswith("cuda:"):
                env["CUDA_VISIBLE_DEVICES"] = device.split(":", 1)[1]
                local = "cuda:0"
            job = {"recipe": str(recipe_path), "target": place.target, "device": local,
                   "name": place.name, "cc": place.cc, "cache": str(cache.root.parent),
                   "jobs": share, "parent": os.getpid()}  # fmt: skip
            log: IO[bytes] = stack.enter_context(tempfile.TemporaryFile())
            cmd = [sys.executable, "-m", "aot.model_pool", json.dumps(job)]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            workers.append((proc, log, device))
        finished = False
        while not finished:
            finished = all(p.poll() is not None for p, _, _ in workers)  # then a last look
            for key in [k for k in waiting if cache.has(k)]:
                done(waiting.pop(key))
            for proc, out, device in workers:
                if proc.poll():
                    raise BuildError(_failure(proc.returncode, out, device))
            if not finished:
                time.sleep(0.2)
        if waiting:
            missing = ", ".join(f"{b} ({m})" for b, m in waiting.values())
            raise BuildError(f"[model] the build's workers ended without buckets {missing}")


def _stop(workers: list[tuple[subprocess.Popen[bytes], IO[bytes], str]]) -> None:
    """Kill the workers still running (after a failure, or an interrupt of the build)."""
    for proc, _, _ in workers:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _failure(rc: int, log: IO[bytes], device: str) -> str:
    log.seek(0)
    text = log.read().decode(errors="replace")
    for line in text.splitlines():
        if line.startswith(ERROR_PREFIX):
            return line[len(ERROR_PREFIX) :].replace("\\n", "\n")
    tail = "\n".join(text.strip().splitlines()[-15:])
    return f"[model] the worker compiling on {device} exited with status {rc}:\n{tail}"


def _die_with_parent(parent: int) -> None:
    """Linux: this worker gets SIGTERM when the build process dies, whatever kills it (a
    time limit's signal to the build alone would otherwise leave it tuning on the GPU). If
    the build died before this ran, the worker's parent is already another process: exit."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        sys.exit(3)


def main(argv: Sequence[str] | None = None) -> int:
    """One worker: compile its share of (bucket, mode) jobs into the cache."""
    job = json.loads((sys.argv[1:] if argv is None else argv)[0])
    # A terminal's Ctrl-C reaches the whole process group: the build handles it and
    # stops this worker; dying of it here would read as a failed bucket.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(job["parent"])
    from . import model as m

    try:
        import torch

        mr = load(Path(job["recipe"])).model
        assert mr is not None
        cc = tuple(job["cc"]) if job["cc"] else None
        place = m._Place(job["target"], job["device"], job["name"], cc)
        cache = CompileCache(Path(job["cache"]))
        sources = m.source_digest(mr.source)
        model, reference = m._instantiate(mr, m._factory(mr), place)
        for raw, mode in job["jobs"]:
            bucket = tuple(raw)
            key = m.bucket_key(mr, sources, place, bucket, str(torch.__version__), mode)
            m.compile_to_cache(mr, model, reference, place, (bucket, mode), cache, key)
    except BuildError as exc:
        print(ERROR_PREFIX + str(exc).replace("\n", "\\n"), flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
