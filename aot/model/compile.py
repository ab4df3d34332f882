"""Compile: one bucket of the model, in one Inductor mode, into a verified artifact.

The module is traced by ``torch.export.export`` at the bucket's shapes; its
``graph_module`` takes the parameters and buffers as leading inputs ("lifted"), in the
export graph signature's order, then the user inputs. The recipe's ``backend`` compiles it
with the patches of the job's ``mode`` (``max-autotune`` means Inductor's
``max-autotune-no-cudagraphs`` options, because the loader captures its own CUDA graph):

- ``aoti`` (the default): ``torch._inductor.aoti_compile_and_package``, weights left out of
  the package (``aot_inductor.package_constants_in_so`` off), one .pt2 per bucket. The
  loader opens it with torch's C++ runtime and imports none of the compiler stack, and the
  kernels' configurations are fixed in the library: a fresh process serves the layer with
  zero compilations and zero autotuning. Its C++ is built with the ``g++`` on PATH, not
  ``$CXX``, and a library with its own static C++ runtime is refused
  (``_check_cxx_runtime``: such a library segfaulted at load on the H200 image).
- ``inductor``: ``torch._inductor.standalone_compile(gm, [*weights, *inputs],
  dynamic_shapes="from_example_inputs", ...)``, saved with ``CompiledArtifact.save``. It
  loads with zero Triton compilations and zero Inductor code generation, but imports the
  compiler stack, and at max-autotune its pointwise kernels tune again at their first call
  in every process, so the recipe allows it at mode ``default`` only.

Weights never enter the bundle: ``torch.export`` lifts them into the graph signature,
whose names (``named_parameters``/``named_buffers`` names), shapes, strides and dtypes the
manifest records so the loader can check the service's module against them. Lifted
constant tensors (tensors created inside ``forward``) have no module name to bind, so a
model that has them is refused.

What ships is what is verified (aot/model/verify.py): the artifact's bytes, loaded back by
the loader's own code. A verified artifact is cached under its ``bucket_key``.

Buckets are independent, so several compile at once in worker processes
(``compile_in_workers``; aot/workers.py), one per local device of the target's kind: a
bucket of an AOTInductor model is minutes of autotuning on the GPU, then a C++ build on the
CPU. Each worker sees one GPU (``CUDA_VISIBLE_DEVICES``), because autotuning measures
kernels and two processes timing on one GPU would disturb each other.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import io
import os
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loader import manifest as mf
from loader.model_load import load_artifact, named_tensors

from ..cache import CompileCache
from ..elf import needed_libraries
from ..errors import AotcError, BuildError
from ..recipe import ModelRecipe, load
from ..recipe.model import MODES
from ..workers import LOG_LINES, Placement, WorkerDied, WorkerPool, local_device
from .factory import dtype_name, instantiate, load_factory, random_inputs
from .plan import BucketJob, Place, aoti_compiler, job_name, largest_first, where_of
from .verify import check_error, check_outputs, check_padding, flat, rel_err


@dataclass(frozen=True)
class Artifact:
    """One bucket compiled in one mode, verified."""

    data: bytes
    metrics: Mapping[str, Any]  # compile_s, rel_err, first_bytes, padded_from, pad_rel_err
    weights: tuple[mf.ModelWeight, ...]  # the lifted inputs, in graph-signature order
    single_output: bool  # forward returns one tensor, not a tuple


def compile_bucket(
    mr: ModelRecipe, model: Any, reference: Any, place: Place, job: BucketJob
) -> Artifact:
    """Export, compile and verify ``job``'s bucket on ``place`` (see the module's doc)."""
    import torch

    where = where_of(mr, job.bucket) + (f", mode {job.mode}" if mr.label(job.mode) else "")
    sizes = dict(zip(mr.dims, job.bucket, strict=True))
    gen = torch.Generator(device="cpu").manual_seed(mr.seed + 1)
    xs = random_inputs(mr, sizes, place.device, gen)
    t0 = time.perf_counter()
    with torch.no_grad():
        try:
            ep = torch.export.export(model, tuple(xs))
        except Exception as exc:
            raise BuildError(f"[model] at {where}: torch.export failed: {exc}") from exc
        weights, records = _weights(model, ep, mr, where)
        data, first_bytes, compile_s = _compile(torch, mr, ep, [*weights, *xs], job.mode, where, t0)
        # What is verified is what ships: the bytes, loaded back by the loader's own code.
        names = [r.name for r in records]
        run = load_artifact(torch, mr.backend, data, weights, names, torch.device(place.device))
        outs, single = flat(model(*xs))
        got = run(*xs)
        ref, _ = flat(reference(*[x.to(torch.float64) for x in xs]))
    check_outputs(mr, got, outs, sizes, where)
    err = max(rel_err(g, r) for g, r in zip(got, ref, strict=True))
    metrics: dict[str, Any] = {
        "compile_s": round(compile_s, 3), "rel_err": err, "first_bytes": first_bytes,
    }  # fmt: skip
    check_error(mr, err, where)
    padded = check_padding(mr, run, reference, place.device, sizes, gen, where)
    if padded is not None:
        metrics["padded_from"], metrics["pad_rel_err"] = padded
    return Artifact(data, metrics, tuple(records), single)


def _compile(
    torch: Any, mr: ModelRecipe, ep: Any, example: list[Any], mode: str, where: str,
    t0: float,
) -> tuple[bytes, int, float]:  # fmt: skip
    """The exported program compiled by the recipe's backend: (artifact, size of the
    first artifact written, seconds since ``t0`` when it was written)."""
    patches = dict(torch._inductor.list_mode_options(MODES[mode]))
    patches.update(mr.options)
    with tempfile.TemporaryDirectory(prefix="aotc-model-") as tmp:
        if mr.backend == "aoti":
            data = _aoti_package(torch, ep, patches, aoti_compiler(mr), tmp, where)
            return data, len(data), time.perf_counter() - t0
        data = _standalone(torch, ep, example, patches, tmp)
        seconds = time.perf_counter() - t0
        # Autotuning compiles every candidate kernel, and the first artifact carries them
        # all. Compiled again, the graph is a hit in Inductor's own caches and the
        # artifact holds only the kernels it runs.
        again = _standalone(torch, ep, example, patches, tmp)
        return min(data, again, key=len), len(data), seconds


def _standalone(
    torch: Any, ep: Any, example: list[Any], patches: Mapping[str, Any], tmp: str
) -> bytes:
    art = torch._inductor.standalone_compile(
        ep.graph_module, example, dynamic_shapes="from_example_inputs",
        options={"config_patches": patches},
    )  # fmt: skip
    path = os.path.join(tmp, "artifact.bin")
    art.save(path=path, format="binary")
    data = Path(path).read_bytes()
    os.unlink(path)
    return data


def _weights(
    model: Any, ep: Any, mr: ModelRecipe, where: str
) -> tuple[list[Any], list[mf.ModelWeight]]:
    """The lifted inputs in graph-signature order: (tensors, manifest records)."""
    from torch.export.graph_signature import InputKind

    named = named_tensors(model)
    tensors, records = [], []
    users = 0
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            users += 1
            continue
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER):
            raise BuildError(
                f"[model] at {where}: export lifted a {spec.kind.name.lower()} "
                f"({spec.target}); only parameters and buffers can be bound at load. Make "
                "tensors created in forward buffers of the module (register_buffer)"
            )
        if users:
            raise BuildError(f"[model] at {where}: the export graph takes user inputs "
                             "before weights; not supported")  # fmt: skip
        t = named[spec.target]
        tensors.append(t)
        kind = "parameter" if spec.kind == InputKind.PARAMETER else "buffer"
        records.append(mf.ModelWeight(name=spec.target, kind=kind, dtype=dtype_name(t.dtype),
                                      shape=tuple(t.shape), stride=tuple(t.stride())))  # fmt: skip
    if users != len(mr.inputs):
        raise BuildError(f"[model] at {where}: forward takes {users} tensor inputs; the "
                         f"recipe's [model].inputs names {len(mr.inputs)}")  # fmt: skip
    return tensors, records


def _aoti_package(
    torch: Any, ep: Any, patches: Mapping[str, Any], cxx: str, tmp: str, where: str
) -> bytes:
    """An AOTInductor package of the exported program, without its weights (bound at load
    from the service's module, as for the other backend)."""
    path = os.path.join(tmp, "model.pt2")
    configs = {**patches, "aot_inductor.package_constants_in_so": False, "cpp.cxx": cxx}
    try:
        torch._inductor.aoti_compile_and_package(ep, package_path=path, inductor_configs=configs)
    except Exception as exc:
        raise BuildError(f"[model] at {where}: AOTInductor failed: {exc}") from exc
    data = Path(path).read_bytes()
    _check_cxx_runtime(data, cxx, where)
    return data


def _check_cxx_runtime(package: bytes, cxx: str, where: str) -> None:
    """Refuse a package whose shared library carries its own copy of the C++ runtime: loaded
    into a PyTorch process, which has libstdc++.so.6 already, the two copies mix and the
    load crashes (seen on the H200 image: a segfault in std::regex, in AOTInductor's
    parse_device_str, when $CXX linked libstdc++ statically). Checked before the build
    loads it, so the build stops with this message instead of that crash."""
    with zipfile.ZipFile(io.BytesIO(package)) as z:
        for name in z.namelist():
            if not name.endswith(".so"):
                continue
            try:
                needed = needed_libraries(z.read(name))
            except ValueError as exc:
                raise BuildError(f"[model] at {where}: AOTInductor wrote an unreadable "
                                 f"library {name}: {exc}") from exc  # fmt: skip
            if not any(n.startswith("libstdc++.so") for n in needed):
                raise BuildError(
                    f"[model] at {where}: the AOTInductor library built by {cxx} does not "
                    f"load the shared C++ runtime (it needs only {', '.join(needed)}): that "
                    "compiler links libstdc++ statically, and such a library crashes when a "
                    'PyTorch process loads it. Set [model].options."cpp.cxx" to a g++ '
                    'that links it dynamically, e.g. "/usr/bin/g++"'
                )


# --- the compile cache ---------------------------------------------------------------


def store(cache: CompileCache, key: str, art: Artifact) -> None:
    """Cache a verified artifact (nothing else is ever cached)."""
    cache.put(key, {"ok": True, "metrics": dict(art.metrics), "single_output": art.single_output,
                    "weights": [w.to_json() for w in art.weights]}, art.data)  # fmt: skip


def cached(cache: CompileCache, key: str) -> Artifact | None:
    """A verified artifact from the cache; a damaged entry is a miss."""
    hit = cache.get(key)
    if hit is None:
        return None
    meta, data = hit
    try:
        weights = tuple(mf.ModelWeight.from_json(w, "cache") for w in meta["weights"])
        return Artifact(data, dict(meta["metrics"]), weights, bool(meta["single_output"]))
    except (KeyError, TypeError, ValueError, mf.ManifestError):
        return None


# --- worker processes ----------------------------------------------------------------


@dataclass(frozen=True)
class WorkerJob:
    """A bucket for a worker process (picklable): the worker reads the recipe itself."""

    recipe: Path
    place: Place
    job: BucketJob


@functools.cache
def _prepared(recipe: Path, place: Place) -> tuple[ModelRecipe, Any, Any]:
    """The recipe's model and its module on ``place``, made once per worker."""
    mr = load(recipe).model
    if mr is None:
        raise BuildError(f"{recipe}: [model] is gone from the recipe; build it again")
    return mr, *instantiate(mr, load_factory(mr), place)


def compile_in_worker(w: WorkerJob) -> Artifact:
    """In a worker placed on ``w.place.device`` (``Placement.on``): compile its bucket."""
    place = replace(w.place, device=local_device(w.place.device), devices=())
    mr, model, reference = _prepared(w.recipe, place)
    return compile_bucket(mr, model, reference, place, w.job)


def compile_in_workers(
    mr: ModelRecipe, recipe: Path, place: Place, devices: Sequence[str],
    todo: Sequence[BucketJob], done: Callable[[BucketJob, Artifact], None],
) -> dict[BucketJob, Artifact]:  # fmt: skip
    """Compile ``todo`` on one worker per device in ``devices``, the largest buckets
    first; ``done(job, artifact)`` is called as each lands. The first failure stops the
    other workers and becomes the build's error."""
    got: dict[BucketJob, Artifact] = {}
    placements = [Placement.on(d) for d in devices]
    with WorkerPool(placements, log=True) as pool:
        futures = {pool.submit(compile_in_worker, WorkerJob(recipe, place, job)): job
                   for job in largest_first(todo)}  # fmt: skip
        for fut in cf.as_completed(futures):
            job = futures[fut]
            got[job] = _landed(mr, fut, job)
            done(job, got[job])
    return got


def _landed(mr: ModelRecipe, fut: cf.Future[Artifact], job: BucketJob) -> Artifact:
    """A worker's artifact, or its failure as the build's error."""
    try:
        return fut.result()
    except WorkerDied as died:
        tail = f":\n{died.log}" if died.log else ""
        raise BuildError(f"[model] the worker compiling on {died.placement.label} ended "
                         f"({died.how}){tail}") from None  # fmt: skip
    except AotcError:
        raise
    except Exception as exc:
        trace = "".join(getattr(exc, "__notes__", ()))
        tail = "\n".join(trace.strip().splitlines()[-LOG_LINES:])
        raise BuildError(f"[model] at {job_name(mr, job)}: the worker failed: "
                         f"{type(exc).__name__}: {exc}\n{tail}") from exc  # fmt: skip
