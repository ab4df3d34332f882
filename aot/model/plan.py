"""Plan: where a ``[model]`` is compiled, what each compilation is, and its cache key.

A place is a target whose GPU kind is on this machine (or the CPU, with ``--model-device
cpu``). On each place every bucket is compiled in every Inductor mode the recipe lists:
one ``BucketJob`` each, with a content address (``bucket_key``) under which the verified
artifact is cached. Jobs a place needs compiled are spread over worker processes
(``worker_devices``), one per local device of the place's kind by default.
"""

from __future__ import annotations

import hashlib
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from loader.buckets import BucketGrid, model_grid

from ..cache import CompileCache, key_of
from ..errors import BuildError
from ..recipe import ModelRecipe, Recipe

if TYPE_CHECKING:
    from ..tune.gpu import GpuInfo

DEVICES = ("auto", "cuda", "cpu")


@dataclass(frozen=True)
class ModelOptions:
    """Where ``build`` compiles the model. ``auto``: on each target whose GPU kind is here
    (an error when none is); ``cuda``: the same; ``cpu``: for the CPU only (to test the flow
    on a machine without a GPU; such a bundle serves CPU modules only)."""

    device: str = "auto"
    gpus: list[GpuInfo] | None = None  # None: ask the driver
    cache: CompileCache | None = None  # verified bucket artifacts by content; None: none
    progress: bool = False
    # Processes compiling buckets at once (aot/model/compile.py), over the local GPUs of
    # the target's kind; None: one per GPU (autotuning wants a GPU to itself), one on the CPU.
    workers: int | None = None


@dataclass(frozen=True)
class Place:
    """A target the model is compiled for, and the local device that compiles it."""

    target: str
    device: str  # torch device string: "cpu", "cuda:0"
    name: str  # the device's name: "NVIDIA H200", or the CPU's
    cc: tuple[int, int] | None
    devices: tuple[str, ...] = ()  # every local device of this kind, for worker processes


class BucketJob(NamedTuple):
    """One compilation: a bucket (an upper bound per dimension) in one Inductor mode."""

    bucket: tuple[int, ...]
    mode: str


def places(recipe: Recipe, opts: ModelOptions) -> list[Place]:
    """Where the recipe's ``[model]`` is compiled; an error naming the fix when nowhere."""
    if opts.device not in DEVICES:
        raise BuildError(f"model device {opts.device!r}: use one of {', '.join(DEVICES)}")
    if opts.device == "cpu":
        import platform

        name = platform.processor() or platform.machine()
        return [Place("cpu", "cpu", name, None, ("cpu",))]
    from ..tune.gpu import detect, matches

    gpus = detect() if opts.gpus is None else opts.gpus
    found = []
    for target in recipe.targets:
        mine = [g for g in gpus if matches(target, g)]
        if mine:
            gpu = mine[0]
            devices = tuple(f"cuda:{g.ordinal}" for g in mine if g.cc == gpu.cc)
            found.append(Place(target.name, f"cuda:{gpu.ordinal}", gpu.name, gpu.cc, devices))
    if not found:
        have = ", ".join(f"{g.name} ({g.arch})" for g in gpus) or "no GPU"
        want = ", ".join(t.name for t in recipe.targets)
        name = recipe.model.name if recipe.model is not None else "model"
        raise BuildError(
            f"[model] {name}: compiling a model needs a GPU of a target's kind "
            f"({want}); this machine has {have}. Build on such a machine, or pass "
            "--model-device cpu for a CPU-only bundle (tests, prototyping)"
        )
    return found


def grid(mr: ModelRecipe) -> BucketGrid:
    """The model's buckets, as the loader serves them (row-major: the bundle's order)."""
    return model_grid(mr.dims, mr.buckets, mr.pad, f"model {mr.name!r}")


def jobs(mr: ModelRecipe) -> list[BucketJob]:
    """Every compilation of one place, in the order the bundle lists them."""
    return [BucketJob(b, m) for b in grid(mr) for m in mr.modes]


def largest_first(todo: Sequence[BucketJob]) -> list[BucketJob]:
    """``todo`` in the order workers take them: the largest buckets (by element count)
    first, so that the last to finish is a small one."""
    return sorted(todo, key=lambda j: math.prod(j.bucket), reverse=True)


def worker_devices(opts: ModelOptions, place: Place, missing: int) -> list[str]:
    """The devices of the worker processes for ``missing`` jobs: ``opts.workers`` of them
    (default one per local device of the place's kind), dealt round the devices, at most
    ``missing``; one alone means no workers (the build process compiles). More workers
    than GPUs share them: right for modes that do not autotune (``default``), whose
    compilation is CPU work, but autotuning workers on one GPU disturb each other's
    timings."""
    pool = place.devices or (place.device,)
    n = min(missing, opts.workers or len(pool))
    if n < 2:
        return [place.device]
    return [pool[i % len(pool)] for i in range(n)]


def where_of(mr: ModelRecipe, bucket: Sequence[int]) -> str:
    """A bucket as the report and errors name it: ``batch=1, seq=128``."""
    return ", ".join(f"{d}={b}" for d, b in zip(mr.dims, bucket, strict=True))


def job_name(mr: ModelRecipe, job: BucketJob) -> str:
    """A job as progress and errors name it: its bucket, and its mode when there are several."""
    return where_of(mr, job.bucket) + (f" [{job.mode}]" if mr.label(job.mode) else "")


def pad_sizes(mr: ModelRecipe, sizes: Mapping[str, int]) -> dict[str, int]:
    """The sizes a bucket's padding check runs at: each padded dimension one past the
    bucket below (half the bucket for the smallest)."""
    small = dict(sizes)
    for d, bounds in zip(mr.dims, mr.buckets, strict=True):
        if d in mr.pad:
            i = bounds.index(sizes[d])
            small[d] = bounds[i - 1] + 1 if i else max(1, sizes[d] // 2)
    return small


def aoti_compiler(mr: ModelRecipe) -> str:
    """The C++ compiler of an AOTInductor package: ``[model].options."cpp.cxx"`` if set,
    else the ``g++`` on PATH (Inductor's own default is ``$CXX``, which on the H200 image
    is a g++ that links the C++ runtime statically; see aot/model/compile.py)."""
    chosen = mr.options.get("cpp.cxx")
    if chosen is not None:
        return str(chosen)
    return shutil.which("g++") or "g++"


def source_digest(source: Path) -> str:
    """sha256 over the model's Python sources: every ``*.py`` in the factory file's folder
    and below, so a change to a module it imports from beside it is seen too."""
    h = hashlib.sha256()
    for path in sorted(source.parent.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        h.update(path.relative_to(source.parent).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def bucket_key(
    mr: ModelRecipe, sources: str, place: Place, bucket: tuple[int, ...], torch_version: str,
    mode: str,
) -> str:  # fmt: skip
    """Content address of one bucket's verified artifact in one Inductor ``mode``:
    everything that can change it. Of the other buckets only the size the padding check
    runs at is in it, so a bucket keeps its entry when buckets are added or removed
    elsewhere in the grid (and when other modes are added to the recipe). Which device of
    the place's kind compiles it is not in it."""
    sizes = dict(zip(mr.dims, bucket, strict=True))
    return key_of({
        "kind": "model-bucket", "sources": sources, "factory": mr.factory,
        "kwargs": dict(mr.kwargs), "dtype": mr.dtype,
        "inputs": [i.to_json() for i in mr.inputs], "dims": list(mr.dims),
        "padded_from": pad_sizes(mr, sizes), "pad": list(mr.pad),
        "outputs": [list(o) for o in mr.outputs], "mode": mode,
        "options": dict(mr.options), "tolerance": mr.tolerance, "seed": mr.seed,
        "backend": mr.backend, "cxx": aoti_compiler(mr) if mr.backend == "aoti" else None,
        "bucket": list(bucket), "device": place.device.split(":")[0],
        "device_name": place.name, "cc": list(place.cc) if place.cc else None,
        "torch": torch_version, "triton": _version("triton"),
    })  # fmt: skip


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"
