"""Model mode (issue 5): a PyTorch ``nn.Module`` compiled per bucket ahead of time.

Mechanism, and why. For each bucket (one upper bound per symbolic dimension) the module is
traced by ``torch.export.export`` at the bucket's shapes; its ``graph_module`` takes the
parameters and buffers as leading inputs ("lifted"), in the export graph signature's
order, then the user inputs. The recipe's ``backend`` compiles it, with the patches of its
``mode`` (``max-autotune`` means Inductor's ``max-autotune-no-cudagraphs`` options,
because the loader captures its own CUDA graph), or of each of its modes when it lists
several (one compilation, and one cache entry, per bucket and mode):

- ``aoti`` (the default): ``torch._inductor.aoti_compile_and_package``, weights left out of
  the package (``aot_inductor.package_constants_in_so`` off), one .pt2 per bucket. The
  loader opens it with torch's C++ runtime and imports none of the compiler stack, and the
  kernels' configurations are fixed in the library: on the H200 a fresh process served the
  layer with zero compilations and zero autotuning. Its C++ is built with the ``g++`` on
  PATH, not ``$CXX``, and a library with its own static C++ runtime is refused
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

Each bucket is verified against eager PyTorch run in float64 (a copy of the same weights,
upcast) at the bucket's bound and, when the bucket pads a dimension, at a smaller size
padded up to the bucket: padding along a sequence dimension only preserves the outputs
when no real position reads a padded one (causal attention, padding at the end), and the
build checks that rather than trusting the recipe. Both checks run the bytes that ship,
loaded by ``loader.model.load_artifact``, the loader's own code.

Then, with ``[model].select = "fastest"`` (the default), each bucket's artifacts (one per
mode) are timed against the module's own eager forward, each replayed from a CUDA graph
and called directly, as the loader serves them, and the fastest is what the bucket serves
(aot/model_select.py): only a compiled winner's artifact enters the bundle.

The recipe table (``[model]``) is parsed, without importing torch, by aot/recipe/model.py.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import io
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loader import manifest as mf
from loader.args import TORCH_NAMES, element_type
from loader.model import (
    concrete,
    eager_call,
    leading,
    load_artifact,
    named_tensors,
    pad_zeros,
)

from .cache import CompileCache, key_of
from .elf import needed_libraries
from .errors import BuildError
from .model_pool import Job, compile_in_workers
from .model_select import Choice, Serving, measure
from .progress import Progress
from .recipe.model import MODES, ModelRecipe

if TYPE_CHECKING:
    from .tune.gpu import GpuInfo

# --- build --------------------------------------------------------------------------------

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
    # Processes compiling buckets at once (aot/model_pool.py), dealt round the local GPUs of
    # the target's kind; None: one per GPU (autotuning wants a GPU to itself), one on the CPU.
    workers: int | None = None


@dataclass(frozen=True)
class _Place:
    target: str
    device: str  # torch device string: "cpu", "cuda:0"
    name: str
    cc: tuple[int, int] | None
    devices: tuple[str, ...] = ()  # every local device of this kind, for worker processes


@dataclass
class ModelBuild:
    spec: mf.ModelSpec
    payloads: dict[str, bytes]
    report: list[str] = field(default_factory=list)
    source_sha256: str = ""
    cached: int = 0  # buckets taken from the compile cache


def entry_name(target: str, dims: Sequence[str], bucket: Sequence[int]) -> str:
    return f"model/{target}/" + ",".join(f"{d}={b}" for d, b in zip(dims, bucket, strict=True))


def build_model(recipe: Any, opts: ModelOptions) -> ModelBuild:
    """Compile, verify and serialize every bucket of ``recipe.model`` for every place.

    A bucket whose key (``bucket_key``) is in ``opts.cache`` is taken from there, already
    verified, instead of compiled again: rebuilding an unchanged model costs nothing, and a
    build that stopped halfway resumes where it stopped."""
    import torch

    mr: ModelRecipe = recipe.model
    places = _places(recipe, opts)
    _check_options(mr, torch)
    factory = _factory(mr)
    cache = opts.cache or CompileCache(None)
    sources = source_digest(mr.source)
    payloads: dict[str, bytes] = {}
    artifacts: list[mf.ModelArtifacts] = []
    weights_spec: tuple[mf.ModelWeight, ...] | None = None
    single_output = True
    cached = 0
    backend = f"backend {mr.backend}" + (f", C++ compiler {aoti_compiler(mr)}"
                                         if mr.backend == "aoti" else "")  # fmt: skip
    report = [f"## Model `{mr.name}` ({mr.source_text}, {mr.dtype}, mode {mr.mode}, {backend})",
              ""]  # fmt: skip
    grid = mr.bucket_grid
    jobs = [(b, m) for b in grid for m in mr.modes]  # one compilation each
    bar = Progress(len(jobs) * len(places), f"model {mr.name}", enabled=opts.progress)

    def job_name(job: Job) -> str:
        return where_of(mr, job[0]) + (f" [{job[1]}]" if mr.label(job[1]) else "")

    for place in places:
        model = reference = None  # made on the first bucket not in the cache
        buckets: list[mf.ModelBucket] = []
        report += [f"### {place.target} ({place.name})", "",
                   "| bucket | compile s | bytes | rel err | padded from | rel err padded | "
                   "timed µs | serves |",
                   "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        tv = str(torch.__version__)
        keys = {j: bucket_key(mr, sources, place, j[0], tv, j[1]) for j in jobs}
        hits = {j: _cached(cache, keys[j]) for j in jobs}
        missing = [j for j in jobs if hits[j] is None]
        devices = _worker_devices(opts, place, len(missing), cache)
        if len(devices) > 1:  # the workers fill the cache; the loop below packs from it
            compile_in_workers(recipe.path, place, devices, missing, keys, cache,
                               lambda j: bar.advance(job_name(j)))  # fmt: skip
        fresh = set(missing) if len(devices) > 1 else set()
        for bucket in grid:
            where = where_of(mr, bucket)
            arts: dict[str, _Compiled] = {}  # mode -> its verified artifact
            for mode in mr.modes:
                job = (bucket, mode)
                got = hits[job]
                if got is None and job in fresh:  # a worker's bucket, read back
                    got = _cached(cache, keys[job])
                if got is None:
                    if model is None:
                        model, reference = _instantiate(mr, factory, place)
                    got = compile_to_cache(mr, model, reference, place, job, cache, keys[job])
                if job not in fresh:
                    bar.advance(job_name(job) + (" (cached)" if hits[job] else ""))
                wspec, single = got[2], got[3]
                if weights_spec is None:
                    weights_spec, single_output = wspec, single
                elif wspec != weights_spec:
                    raise BuildError(f"[model] at {where}: the export graph's parameters differ "
                                     "from the first bucket's; the module must not depend on "
                                     "shapes for which weights it uses")  # fmt: skip
                arts[mode] = got
            all_cached = all(hits[(bucket, m)] is not None for m in mr.modes)
            cached += all_cached
            first = mr.modes[0]
            serving = Serving("compiled", place.device != "cpu", mr.label(first))
            timed, extra = "", dict[str, Any]()
            if mr.select == "fastest":  # measured at every build, never cached
                if model is None:
                    model, reference = _instantiate(mr, factory, place)
                datas = {mr.label(m): arts[m][0] for m in mr.modes}
                choice = _select(mr, model, place, bucket, datas, arts[first][2], where)
                serving = choice.serving
                extra["timed_us"] = {k: round(v, 1) for k, v in choice.times_us.items()}
                if choice.errors:  # out of the running; say why
                    extra["not_servable"] = {k: v[:300] for k, v in choice.errors.items()}
                timed = _timed_cell(choice)
            served = (serving.mode or first) if serving.impl == "compiled" else first
            data, metrics = arts[served][0], {**arts[served][1], **extra}
            if len(mr.modes) > 1:  # each mode's compilation, for the record
                metrics["modes"] = {m: {k: arts[m][1][k] for k in ("compile_s", "rel_err")}
                                    for m in mr.modes}  # fmt: skip
            entry = ""
            if serving.impl == "compiled":
                entry = entry_name(place.target, mr.dims, bucket)
                payloads[entry] = data
            buckets.append(mf.ModelBucket(bucket, entry, metrics, serving.impl, serving.graph,
                                          serving.mode))  # fmt: skip
            compile_s = (
                "cached"
                if all_cached
                else " + ".join(
                    "cached" if hits[(bucket, m)] else f"{arts[m][1]['compile_s']:.1f}"
                    for m in mr.modes
                )
            )
            report.append(
                f"| {where} | {compile_s} | {len(data) if entry else 'none'} | "
                f"{metrics['rel_err']:.2e} | {metrics.get('padded_from', '')} | "
                f"{_fmt(metrics.get('pad_rel_err'))} | {timed} | {serving.label} |"
            )
        report.append("")
        artifacts.append(
            mf.ModelArtifacts(
                target=place.target,
                device="cpu" if place.device == "cpu" else "cuda",
                device_name=place.name,
                cc=place.cc,
                torch=str(torch.__version__),
                mode=mr.mode,
                buckets=tuple(buckets),
                backend=mr.backend,
            )
        )
    bar.close()
    spec = mf.ModelSpec(
        name=mr.name,
        source=mr.source_text,
        dtype=mr.dtype,
        inputs=mr.inputs,
        outputs=mr.outputs,
        single_output=single_output,
        dims=mr.dims,
        buckets=mr.buckets,
        pad=mr.pad,
        weights=weights_spec or (),
        artifacts=tuple(artifacts),
    )
    sha = hashlib.sha256(mr.source.read_bytes()).hexdigest()
    return ModelBuild(spec, payloads, report, sha, cached)


_Compiled = tuple[bytes, dict[str, Any], tuple[mf.ModelWeight, ...], bool]


def where_of(mr: ModelRecipe, bucket: Sequence[int]) -> str:
    """A bucket as the report and errors name it: ``batch=1, seq=128``."""
    return ", ".join(f"{d}={b}" for d, b in zip(mr.dims, bucket, strict=True))


def compile_to_cache(
    mr: ModelRecipe, model: Any, reference: Any, place: _Place, job: Job,
    cache: CompileCache, key: str,
) -> _Compiled:  # fmt: skip
    """Compile and verify one bucket in one mode (``job``), and store it in ``cache`` under
    ``key``."""
    bucket, mode = job
    where = where_of(mr, bucket) + (f", mode {mode}" if mr.label(mode) else "")
    data, metrics, wspec, single = _compile_bucket(mr, model, reference, place, bucket, mode, where)
    cache.put(key, {"ok": True, "metrics": metrics, "single_output": single,
                    "weights": [w.to_json() for w in wspec]}, data)  # fmt: skip
    return data, metrics, wspec, single


def _worker_devices(
    opts: ModelOptions, place: _Place, missing: int, cache: CompileCache
) -> list[str]:
    """The devices of the worker processes for ``missing`` jobs: ``opts.workers`` of them
    (default one per local device of the place's kind), dealt round the devices, at most
    ``missing``; no workers (one device) without a cache directory, through which workers
    hand their buckets back. More workers than GPUs share them: right for modes that do not
    autotune (``default``), whose compilation is CPU work, but autotuning workers on one GPU
    disturb each other's timings."""
    pool = place.devices or (place.device,)
    n = min(missing, opts.workers or len(pool))
    if cache.root is None or n < 2:
        return [place.device]
    return [pool[i % len(pool)] for i in range(n)]


def _select(
    mr: ModelRecipe, model: Any, place: _Place, bucket: tuple[int, ...],
    datas: Mapping[str, bytes], wspec: Sequence[mf.ModelWeight], where: str,
) -> Choice:  # fmt: skip
    """The bucket's compiled artifacts (label -> bytes: ``ModelRecipe.label`` of each mode)
    timed against the module's eager forward, each served as the loader can serve it
    (aot/model_select.py)."""
    import torch

    sizes = dict(zip(mr.dims, bucket, strict=True))
    xs = _random_inputs(mr, sizes, place, torch.Generator(device="cpu").manual_seed(mr.seed))
    named = named_tensors(model)
    names = [w.name for w in wspec]
    device = torch.device(place.device)
    with torch.no_grad():
        runs = {
            label: load_artifact(torch, mr.backend, data, [named[n] for n in names], names, device)
            for label, data in datas.items()
        }  # fmt: skip
        try:
            return measure(torch, runs, eager_call(model), xs, device)
        except Exception as exc:
            served = " (from a CUDA graph, or directly)" if device.type == "cuda" else ""
            raise BuildError(
                f"[model] at {where}: the compiled artifact does not run as the loader serves "
                f"it{served}: {exc!r}. The loader would fail the same way; "
                '[model].select = "compiled" skips this timing'
            ) from exc


def _timed_cell(choice: Choice) -> str:
    """The report's "timed µs" cell: each candidate's median, or why it was not timed."""
    cells = [f"{k} {v:.1f}" for k, v in choice.times_us.items()]
    cells += [f"{k}: not servable ({v[:80]})" for k, v in choice.errors.items()]
    return "; ".join(cells).replace("|", "/")


def _random_inputs(mr: ModelRecipe, sizes: Mapping[str, int], place: _Place, gen: Any) -> list[Any]:
    """Standard-normal inputs at ``sizes`` (drawn in float64 on the CPU from ``gen``, so
    the same on every device), in their dtypes on the place's device."""
    import torch

    return [
        torch.randn(concrete(i.shape, sizes), generator=gen, dtype=torch.float64).to(
            device=place.device, dtype=_torch_dtype(i.dtype)
        )
        for i in mr.inputs
    ]


def _cached(cache: CompileCache, key: str) -> _Compiled | None:
    """A verified bucket from the cache; a damaged entry is a miss."""
    hit = cache.get(key)
    if hit is None:
        return None
    meta, data = hit
    try:
        weights = tuple(mf.ModelWeight.from_json(w, "cache") for w in meta["weights"])
        return data, dict(meta["metrics"]), weights, bool(meta["single_output"])
    except (KeyError, TypeError, ValueError, mf.ManifestError):
        return None


def _check_options(mr: ModelRecipe, torch: Any) -> None:
    """Every ``[model].options`` key must be one of this torch's Inductor settings."""
    config = torch._inductor.config
    for key in mr.options:
        if not hasattr(config, key):
            raise BuildError(
                f"[model].options.{key}: not a TorchInductor setting in torch "
                f"{torch.__version__} (see torch/_inductor/config.py); remove it or fix "
                "its name"
            )


def _instantiate(mr: ModelRecipe, factory: Callable[..., Any], place: _Place) -> tuple[Any, Any]:
    """The recipe's module on ``place`` in its dtype, and a float64 copy for reference."""
    import torch

    torch.manual_seed(mr.seed)
    model = factory(**mr.kwargs)
    if not isinstance(model, torch.nn.Module):
        raise BuildError(f"[model] {mr.source_text} returned {type(model).__name__}, "
                         "not a torch.nn.Module")  # fmt: skip
    model = model.to(device=place.device, dtype=_torch_dtype(mr.dtype)).eval()
    return model, copy.deepcopy(model).to(torch.float64)


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
    mr: ModelRecipe, sources: str, place: _Place, bucket: tuple[int, ...], torch_version: str,
    mode: str,
) -> str:  # fmt: skip
    """Content address of one bucket's verified artifact in one Inductor ``mode``:
    everything that can change it. Of the other buckets only the size the padding check
    runs at is in it, so a bucket keeps its entry when buckets are added or removed
    elsewhere in the grid (and when other modes are added to the recipe)."""
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


def _fmt(x: Any) -> str:
    return f"{x:.2e}" if isinstance(x, float) else ""


def _places(recipe: Any, opts: ModelOptions) -> list[_Place]:
    if opts.device not in DEVICES:
        raise BuildError(f"model device {opts.device!r}: use one of {', '.join(DEVICES)}")
    if opts.device == "cpu":
        import platform

        name = platform.processor() or platform.machine()
        return [_Place("cpu", "cpu", name, None, ("cpu",))]
    from .tune.gpu import detect, matches

    gpus = detect() if opts.gpus is None else opts.gpus
    places = []
    for target in recipe.targets:
        mine = [g for g in gpus if matches(target, g)]
        if mine:
            gpu = mine[0]
            devices = tuple(f"cuda:{g.ordinal}" for g in mine if g.cc == gpu.cc)
            places.append(_Place(target.name, f"cuda:{gpu.ordinal}", gpu.name, gpu.cc, devices))
    if not places:
        have = ", ".join(f"{g.name} ({g.arch})" for g in gpus) or "no GPU"
        want = ", ".join(t.name for t in recipe.targets)
        raise BuildError(
            f"[model] {mr_name(recipe)}: compiling a model needs a GPU of a target's kind "
            f"({want}); this machine has {have}. Build on such a machine, or pass "
            "--model-device cpu for a CPU-only bundle (tests, prototyping)"
        )
    return places


def mr_name(recipe: Any) -> str:
    return str(recipe.model.name)


def _factory(mr: ModelRecipe) -> Callable[..., Any]:
    digest = hashlib.sha256(str(mr.source).encode()).hexdigest()[:12]
    mod_name = f"_aotc_model_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, mr.source)
    if spec is None or spec.loader is None:
        raise BuildError(f"[model].source: cannot import {mr.source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise BuildError(f"[model].source: importing {mr.source} failed: {exc!r}") from exc
    fn = getattr(module, mr.factory, None)
    if not callable(fn):
        raise BuildError(f"[model].source: {mr.source.name} defines no callable "
                         f"{mr.factory!r}")  # fmt: skip
    return fn  # type: ignore[no-any-return]


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, TORCH_NAMES[name])


def dtype_name(dtype: Any) -> str:
    """The manifest's name of a torch dtype: our element type, else torch's own name."""
    return element_type(dtype) or str(dtype).removeprefix("torch.")


def _weights(model: Any, ep: Any, mr: ModelRecipe, where: str) -> tuple[list[Any], list[Any]]:
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
        records.append(
            mf.ModelWeight(
                name=spec.target,
                kind="parameter" if spec.kind == InputKind.PARAMETER else "buffer",
                dtype=dtype_name(t.dtype),
                shape=tuple(t.shape),
                stride=tuple(t.stride()),
            )
        )
    if users != len(mr.inputs):
        raise BuildError(f"[model] at {where}: forward takes {users} tensor inputs; the "
                         f"recipe's [model].inputs names {len(mr.inputs)}")  # fmt: skip
    return tensors, records


def _flat(out: Any) -> tuple[list[Any], bool]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out], True
    if isinstance(out, tuple | list) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out), False
    raise BuildError(f"[model] forward must return a tensor or a tuple of tensors, got "
                     f"{type(out).__name__}")  # fmt: skip


def rel_err(out: Any, ref: Any) -> float:
    import torch

    o, r = out.to(torch.float64), ref.to(torch.float64)
    scale = float(r.abs().max()) if r.numel() else 0.0
    return float((o - r).abs().max()) / max(scale, 1e-30) if r.numel() else 0.0


def _compile_bucket(
    mr: ModelRecipe, model: Any, reference: Any, place: _Place, bucket: tuple[int, ...],
    mode: str, where: str,
) -> _Compiled:  # fmt: skip
    import torch

    sizes = dict(zip(mr.dims, bucket, strict=True))
    gen = torch.Generator(device="cpu").manual_seed(mr.seed + 1)
    xs = _random_inputs(mr, sizes, place, gen)
    t0 = time.perf_counter()
    with torch.no_grad():
        try:
            ep = torch.export.export(model, tuple(xs))
        except Exception as exc:
            raise BuildError(f"[model] at {where}: torch.export failed: {exc}") from exc
        weights, records = _weights(model, ep, mr, where)
        patches = dict(torch._inductor.list_mode_options(MODES[mode]))
        patches.update(mr.options)

        def compile_once() -> bytes:
            art = torch._inductor.standalone_compile(
                ep.graph_module, [*weights, *xs], dynamic_shapes="from_example_inputs",
                options={"config_patches": patches},
            )  # fmt: skip
            return _serialize(art, tmp)

        with tempfile.TemporaryDirectory(prefix="aotc-model-") as tmp:
            if mr.backend == "aoti":
                data = _aoti_package(torch, ep, patches, aoti_compiler(mr), tmp, where)
                first_bytes = len(data)
                compile_s = time.perf_counter() - t0
            else:
                data = compile_once()
                compile_s = time.perf_counter() - t0
                # Autotuning compiles every candidate kernel, and the first artifact carries
                # them all. Compiled again, the graph is a hit in Inductor's own caches and
                # the artifact holds only the kernels it runs.
                again = compile_once()
                first_bytes = len(data)
                data = min(data, again, key=len)
        # What is verified is what ships: the bytes, loaded back by the loader's own code.
        names = [r.name for r in records]
        run = load_artifact(torch, mr.backend, data, weights, names, torch.device(place.device))
        outs, single = _flat(model(*xs))
        got = run(*xs)
        ref, _ = _flat(reference(*[x.to(torch.float64) for x in xs]))
    _check_outputs(mr, got, outs, sizes, where)
    err = max(rel_err(g, r) for g, r in zip(got, ref, strict=True))
    metrics: dict[str, Any] = {
        "compile_s": round(compile_s, 3), "rel_err": err, "first_bytes": first_bytes,
    }  # fmt: skip
    if err > mr.tolerance:
        raise BuildError(f"[model] at {where}: compiled outputs differ from eager float64 by "
                         f"{err:.2e} (relative), above the tolerance {mr.tolerance:g}")  # fmt: skip
    padded = _pad_check(mr, run, reference, place, bucket, sizes, gen, where)
    if padded is not None:
        metrics["padded_from"], metrics["pad_rel_err"] = padded
    return data, metrics, tuple(records), single


def aoti_compiler(mr: ModelRecipe) -> str:
    """The C++ compiler of an AOTInductor package: ``[model].options."cpp.cxx"`` if set,
    else the ``g++`` on PATH (Inductor's own default is ``$CXX``, which on the H200 image
    is a g++ that links the C++ runtime statically; see ``_aoti_package``)."""
    chosen = mr.options.get("cpp.cxx")
    if chosen is not None:
        return str(chosen)
    return shutil.which("g++") or "g++"


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


def _serialize(art: Any, tmp: str) -> bytes:
    path = os.path.join(tmp, "artifact.bin")
    art.save(path=path, format="binary")
    data = Path(path).read_bytes()
    os.unlink(path)
    return data


def _check_outputs(
    mr: ModelRecipe, got: list[Any], eager: list[Any], sizes: Mapping[str, int], where: str
) -> None:
    if len(got) != len(eager):
        raise BuildError(f"[model] at {where}: the compiled graph returns {len(got)} outputs, "
                         f"eager forward {len(eager)}")  # fmt: skip
    if not mr.outputs:
        return
    if len(mr.outputs) != len(got):
        raise BuildError(f"[model].outputs lists {len(mr.outputs)} shapes; forward returns "
                         f"{len(got)} tensors")  # fmt: skip
    for i, (o, sym) in enumerate(zip(got, mr.outputs, strict=True)):
        want = concrete(sym, sizes)
        if tuple(o.shape) != want:
            raise BuildError(f"[model].outputs[{i}]: {list(sym)} is {list(want)} at {where}, "
                             f"but forward returns shape {list(o.shape)}")  # fmt: skip


def pad_sizes(mr: ModelRecipe, sizes: Mapping[str, int]) -> dict[str, int]:
    """The sizes a bucket's padding check runs at: each padded dimension one past the
    bucket below (half the bucket for the smallest)."""
    small = dict(sizes)
    for d, bounds in zip(mr.dims, mr.buckets, strict=True):
        if d in mr.pad:
            i = bounds.index(sizes[d])
            small[d] = bounds[i - 1] + 1 if i else max(1, sizes[d] // 2)
    return small


def _pad_check(
    mr: ModelRecipe, run: Callable[..., list[Any]], reference: Any, place: _Place,
    bucket: tuple[int, ...], sizes: Mapping[str, int], gen: Any, where: str,
) -> tuple[str, float] | None:  # fmt: skip
    """Run the bucket on smaller inputs padded with zeros and compare the sliced outputs
    with eager float64 at the smaller size: proves the recipe's ``pad`` safe here."""
    import torch

    small = pad_sizes(mr, sizes)
    if small == sizes:
        return None
    xs = _random_inputs(mr, small, place, gen)
    padded = [pad_zeros(torch, x, concrete(i.shape, sizes))
              for x, i in zip(xs, mr.inputs, strict=True)]  # fmt: skip
    with torch.no_grad():
        got = run(*padded)
        ref, _ = _flat(reference(*[x.to(torch.float64) for x in xs]))
    err = 0.0
    for o, r, sym in zip(got, ref, mr.outputs, strict=True):
        o = o[leading(concrete(sym, small))]
        err = max(err, rel_err(o, r))
    shown = ", ".join(f"{d}={small[d]}" for d in mr.dims if small[d] != sizes[d])
    if err > mr.tolerance:
        raise BuildError(
            f"[model].pad: at {shown} padded up to {where} the outputs differ from eager by "
            f"{err:.2e} (relative, tolerance {mr.tolerance:g}). Padding a dimension preserves "
            "the outputs only when no real position reads a padded one (per-sample models "
            "for batch; causal attention with padding at the end for a sequence); remove "
            "that dimension from [model] pad"
        )
    return shown, err
