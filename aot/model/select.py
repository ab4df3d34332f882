"""Per bucket, the fastest way to serve it: a compiled artifact (one per Inductor mode the
recipe lists), or the module's own eager forward, each with or without a CUDA graph.

Why. Compiled is not always faster. On the transformer layer of ``recipes/layer.toml``,
AOTInductor at max-autotune lost to eager PyTorch from 8192 rows (batch x seq) up, and so
did ``torch.compile`` max-autotune. The matmuls are the cause: eager's ``F.linear`` runs
cuBLASLt kernels with the bias fused, while Inductor's C++ wrapper offers only Triton
templates and an ``addmm`` that adds the bias separately (its faster ``bias_addmm``
choice has no C++ implementation). At small sizes the compiled artifact wins (fused
kernels, no launch gaps). And a CUDA graph is not free either: replaying one means
copying the call's inputs into the graph's static buffers and its outputs out of them,
which at the largest buckets costs more than the launches it saves. The module called
directly needs neither copy, nor padding.

Which Inductor mode compiles best also depends on the size. At the layer's largest bucket
mode "default" (cuBLAS matmuls with the bias fused, Triton's fused norms and pointwise
kernels) called directly beat eager, where max-autotune's Triton matmuls lose. So
``[model].mode`` may list several modes; each bucket is compiled in each, and each
artifact is a candidate. The measurements behind this paragraph and the one above are in
benchmarks/RESULTS.md ("The 12-bucket layer", "Two modes").

So with ``[model].select = "fastest"`` (the default) the build times every candidate
(``candidates``) the way the loader serves it: a graph candidate copies the inputs in,
replays the graph (``loader.model_load.capture_graph``, the loader's own capture) and
copies the outputs out; a direct one calls the artifact or the module. The candidates take
turns call by call, in an order that rotates (``interleaved``): a GPU's clocks drift over
seconds of back-to-back work, and timed in blocks of calls the build once picked a graph
that a later benchmark measured slower (RESULTS.md, "Timing call by call"). The smallest
median wins; the bundle records every time, and only a compiled winner ships its artifact
(an eager bucket has none: the loader runs the service's own module). Nothing about the
choice is cached: every build measures it again on its own GPU. A candidate that fails as
served (an eager forward that synchronizes with the host cannot be captured, say) is out,
and the report says why; a compiled artifact that fails as served fails the build.

With ``[model].select = "compiled"`` nothing is timed: the first mode's artifact serves,
from a graph on a GPU (``serve``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loader.manifest import serving_label
from loader.model_load import capture_graph, eager_call, load_artifact, named_tensors

from ..errors import BuildError
from ..recipe import ModelRecipe
from .compile import Artifact
from .factory import random_inputs
from .plan import Place

CALLS = 50  # timed calls of each candidate
WARMUP = 5  # untimed calls of each before the first timed one
Timer = Callable[[], float]  # makes one call, returns its time


@dataclass(frozen=True)
class Serving:
    """How the loader serves a bucket: ``impl`` (loader.manifest.MODEL_IMPLS: the
    "compiled" artifact or the module's "eager" forward), and whether it replays a CUDA
    graph of it (``graph``; CUDA only) or calls it directly. ``mode``: which of the
    recipe's Inductor modes compiled the artifact, when it lists several ("" otherwise,
    and for eager)."""

    impl: str
    graph: bool
    mode: str = ""

    @property
    def label(self) -> str:
        return serving_label(self.impl, self.graph, self.mode)


def candidates(device_type: str, modes: Sequence[str] = ("",)) -> tuple[Serving, ...]:
    """What the build times, in order of preference on a tie: each mode's artifact (from a
    graph, then called directly), then the module (likewise). On the CPU nothing is
    replayed from a graph."""
    graphs = (True, False) if device_type == "cuda" else (False,)
    compiled = [Serving("compiled", g, m) for m in modes for g in graphs]
    return (*compiled, *(Serving("eager", g) for g in graphs))


@dataclass(frozen=True)
class ServingChoice:
    serving: Serving
    times_us: Mapping[str, float]  # label -> median µs of one call, as served
    errors: Mapping[str, str]  # label -> why that candidate cannot be served (not timed)


def choose(times_us: Mapping[Serving, float]) -> Serving:
    """The fastest; a tie goes to the candidate listed first (compiled before eager)."""
    return min(times_us, key=times_us.__getitem__)


def measure(
    torch: Any, compiled: Mapping[str, Callable[..., list[Any]]],
    eager: Callable[..., list[Any]], inputs: Sequence[Any], device: Any,
) -> ServingChoice:  # fmt: skip
    """Time every candidate serving of the ``compiled`` artifacts (mode -> ``run``; the
    mode "" when the recipe names one) and of ``eager`` (each ``run(*inputs) -> outputs``)
    at ``inputs``. An error serving a compiled artifact propagates (the loader could not
    serve it either); an eager candidate that fails is left out, with the reason."""
    calls: dict[Serving, Timer] = {}
    errors: dict[str, str] = {}
    for s in candidates(device.type, list(compiled)):
        run = compiled[s.mode] if s.impl == "compiled" else eager
        try:
            calls[s] = _served(torch, run, inputs, device, s.graph)
        except Exception as exc:  # e.g. torch's "operation not permitted when stream is capturing"
            if s.impl == "compiled":
                raise
            errors[s.label] = f"{type(exc).__name__}: {exc}"
    times = interleaved(list(calls.values()), CALLS, WARMUP)
    medians = {s: statistics.median(t) for s, t in zip(calls, times, strict=True)}
    return ServingChoice(choose(medians), {s.label: m for s, m in medians.items()}, errors)


def interleaved(calls: Sequence[Timer], n: int, warmup: int = 0) -> list[list[float]]:
    """``n`` samples of each of ``calls`` (each returns one measurement), taken in turns:
    sample i of every call, then sample i + 1, the order rotating by one each turn so that
    each call runs first equally often. ``warmup`` untimed turns first. Sample i of one
    call and sample i of another were taken moments apart, so they can be paired."""
    k = len(calls)
    out: list[list[float]] = [[] for _ in range(k)]
    for turn in range(warmup + n):
        for j in range(k):
            c = (turn + j) % k
            t = calls[c]()
            if turn >= warmup:
                out[c].append(t)
    return out


def _served(
    torch: Any, run: Callable[..., list[Any]], inputs: Sequence[Any], device: Any, graph: bool
) -> Timer:
    """A function timing one call of ``run`` as the loader makes it (µs): from a
    CUDA graph (inputs copied in, outputs copied out) or directly. Fails here, as the
    loader would, if ``run`` cannot be served that way."""
    if graph:
        static = [x.clone() for x in inputs]
        replayed, outs = capture_graph(torch, run, static, device)

        def call() -> Any:
            for buf, x in zip(static, inputs, strict=True):
                buf.copy_(x)
            replayed.replay()
            return [o.clone() for o in outs]
    else:
        run(*inputs)

        def call() -> Any:
            return run(*inputs)

    on_gpu = device.type == "cuda"
    return lambda: call_us(torch, call, on_gpu)


def call_us(torch: Any, call: Callable[[], Any], on_gpu: bool) -> float:
    """µs of one ``call()``: on a GPU, CUDA events around it from an idle GPU (host time
    included: the GPU waits for the launches), as the loader's latency is measured; else
    the host's clock."""
    if not on_gpu:
        t = time.perf_counter()
        call()
        return (time.perf_counter() - t) * 1e6
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1000


def time_bucket(
    mr: ModelRecipe, model: Any, place: Place, bucket: tuple[int, ...],
    arts: Mapping[str, Artifact], where: str,
) -> ServingChoice:  # fmt: skip
    """The bucket's compiled artifacts (mode -> artifact) timed against the module's eager
    forward, each served as the loader can serve it (``measure``)."""
    import torch

    sizes = dict(zip(mr.dims, bucket, strict=True))
    xs = random_inputs(mr, sizes, place.device, torch.Generator(device="cpu").manual_seed(mr.seed))
    named = named_tensors(model)
    names = [w.name for w in arts[mr.modes[0]].weights]
    device = torch.device(place.device)
    with torch.no_grad():
        runs = {
            mr.label(m): load_artifact(torch, mr.backend, arts[m].data,
                                       [named[n] for n in names], names, device)
            for m in mr.modes
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


@dataclass(frozen=True)
class Outcome:
    """One bucket on one place, compiled and chosen: what the bundle and the report say."""

    bucket: tuple[int, ...]
    serving: Serving
    data: bytes  # the serving mode's artifact; shipped only when a compiled one serves
    metrics: Mapping[str, Any]  # the manifest's record of the bucket
    arts: Mapping[str, Artifact]  # mode -> its artifact
    cached: Mapping[str, bool]  # mode -> taken from the compile cache
    choice: ServingChoice | None  # the timings, when [model].select = "fastest"


def serve(
    mr: ModelRecipe, place: Place, bucket: tuple[int, ...], arts: Mapping[str, Artifact],
    cached: Mapping[str, bool], choice: ServingChoice | None,
) -> Outcome:  # fmt: skip
    """How the bucket is served: as ``choice`` chose, or (no choice) the first mode's
    artifact, from a graph on a GPU; and the metrics recorded for it."""
    first = mr.modes[0]
    serving = Serving("compiled", place.device != "cpu", mr.label(first))
    extra: dict[str, Any] = {}
    if choice is not None:
        serving = choice.serving
        extra["timed_us"] = {k: round(v, 1) for k, v in choice.times_us.items()}
        if choice.errors:  # out of the running; say why
            extra["not_servable"] = {k: v[:300] for k, v in choice.errors.items()}
    served = (serving.mode or first) if serving.impl == "compiled" else first
    metrics = {**arts[served].metrics, **extra}
    if len(mr.modes) > 1:  # each mode's compilation, for the record
        metrics["modes"] = {m: {k: arts[m].metrics[k] for k in ("compile_s", "rel_err")}
                            for m in mr.modes}  # fmt: skip
    return Outcome(bucket, serving, arts[served].data, metrics, arts, cached, choice)
