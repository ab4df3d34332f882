"""What benchmarks/hopper_jit_check.py and benchmarks/decode_jit_check.py share: a recipe
folder's kernel files loaded by path (several folders have a reference.py), a failure
reported in one line, GPU timing, and the fastest of candidate configs. Torch and Triton
only, no aotc."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import triton.testing


def load(folder: Path, name: str) -> ModuleType:
    """``folder/name.py`` as module ``<folder>_<name>``."""
    path = folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{folder.name}_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fail(what: str, e: Exception) -> str:
    """Print a failing check or config in one line, and return that line's reason."""
    line = (str(e).strip().splitlines() or [""])[-1][:160]
    print(f"  FAILED {what}: {type(e).__name__}: {line}", flush=True)
    return f"{type(e).__name__}: {line}"


def bench(fn: Callable[[], Any]) -> float:
    """Median ms of ``fn`` (run once first, so that compiling is not timed; L2 flushed)."""
    fn()
    torch.cuda.synchronize()
    return float(triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median"))


def best_of(
    candidates: Iterable[tuple[str, Callable[[], Callable[[], Any]]]],
) -> tuple[str, float] | None:
    """(label, ms) of the fastest of (label, make) pairs: ``make()`` returns the function to
    time (building it may fail, as running it may); failures are printed and skipped."""
    best = None
    for label, make in candidates:
        try:
            ms = bench(make())
        except Exception as e:
            fail(label, e)
            continue
        if best is None or ms < best[1]:
            best = (label, ms)
    return best
