"""Model mode: serve a bundle's ``[model]`` with the service's own ``nn.Module`` weights.

    runner = loader.load_model("artifacts/layer-0.1.0.aotc", module)  # module on the GPU
    runner.warmup()           # optional: load every bucket and capture its CUDA graph now
    y = runner(x)             # x: [b, t, 1024], any b, t within the buckets

The loader's one use of PyTorch (with loader/model_load.py, the two artifact backends):
``torch`` is imported when ``load_model`` is called, never by ``import loader``.

A bucket the build measured faster in eager PyTorch than compiled (recipe ``select``,
e.g. where cuBLASLt's fused-bias matmuls beat Inductor's kernels) has no artifact: it is
served by the module's own ``forward``.

Per call: the bucket is the smallest one at or above each dimension's size; a dimension
listed in the recipe's ``pad`` may be smaller than its bucket (the input is padded with
zeros at the end and the outputs sliced back), any other must equal a bucket bound
(loader/buckets.py: ``model_grid``). On CUDA a bucket is captured once as a CUDA graph
over static input buffers (at first use or ``warmup``) and replayed, unless the build
measured it faster called directly (a large bucket, where the graph's copies in and out
cost more than the launches it saves): an eager bucket called directly runs the module on
the call's own tensors, unpadded. On the CPU every bucket is called directly.
The weights are the module's own tensors, bound by name at load and read in place: update
them in place (``copy_``), never reassign a parameter, or the graphs read stale memory.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .args import TORCH_NAMES
from .buckets import BucketGrid, model_grid, warm
from .bundle import locate_bundle
from .errors import ArgumentError, BundleError
from .format import BundleFile
from .manifest import Manifest, ManifestError, ModelBucket, ModelSpec, serving_label
from .model_load import (
    bind_weights,
    capture_graph,
    choose_artifacts,
    concrete,
    eager_call,
    leading,
    load_artifact,
    module_device,
    named_tensors,
    pad_zeros,
)
from .signature import KeySource, configured, require

# The torch-side helpers, importable from here as before (their home is model_load.py).
__all__ = [
    "ModelRunner",
    "capture_graph",
    "concrete",
    "eager_call",
    "leading",
    "load_artifact",
    "load_model",
    "named_tensors",
    "pad_zeros",
]


def _torch() -> Any:
    # Imported by name so that `import loader` never pulls torch in (tests pin this).
    return importlib.import_module("torch")


def load_model(
    source: Any,
    module: Any,
    *,
    warmup: bool | Mapping[str, int | Iterable[int]] | None = None,
    cuda_graphs: bool = True,
    copy_outputs: bool = True,
    digest: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    trusted_keys: Sequence[KeySource] | None = None,
) -> ModelRunner:
    """The bundle's model with ``module``'s weights bound: a callable over its inputs.

    ``source``: a bundle path, ``oci://...`` reference, or an open ``loader.Bundle``;
    ``digest`` and ``cache_dir`` as for ``loader.open`` (a path or a reference only).
    ``module``: the service's ``nn.Module``, already on its device and in its dtype, with
    the parameters and buffers the bundle's model was built with (names, shapes, strides,
    dtypes; checked here). ``warmup``: True loads (and on CUDA captures) every bucket now;
    ``{"batch": [1, 8]}`` the buckets of those sizes (other dimensions: every bucket).
    ``cuda_graphs=False`` calls the artifacts directly on CUDA too (for debugging).
    ``copy_outputs=False`` returns, from a CUDA graph, the graph's own output tensors (sliced
    views of them after padding) instead of copies: one copy less per call, but they are
    overwritten by the bucket's next call, as with ``torch.compile``'s CUDA graphs. Use
    them, or clone them, before calling the model again. (A bucket called directly returns
    fresh tensors either way.)
    ``trusted_keys``: as for ``loader.open`` (default ``$AOTC_TRUSTED_KEYS``): with any
    configured, the bundle must be signed by one of them; checked here for every kind of
    ``source``, an open bundle included.
    """
    file, owned = _open(source, digest, cache_dir, trusted_keys)
    manifest = file.spec  # decoded and checked when the file was opened (format.py)
    try:
        manifest.require_complete()
    except ManifestError as exc:
        if owned:
            file.close()
        raise BundleError(f"{file.path}: {exc}") from None
    if manifest.model is None:
        if owned:
            file.close()
        raise BundleError(f"{file.path}: the bundle has no [model]; build a recipe with one")
    runner = ModelRunner(file, manifest, manifest.model, module, cuda_graphs=cuda_graphs,
                         copy_outputs=copy_outputs)  # fmt: skip
    runner._owned = owned
    if warmup:
        runner.warmup(**({} if warmup is True else dict(warmup)))
    return runner


def _open(
    source: Any,
    digest: str | None,
    cache_dir: str | os.PathLike[str] | None,
    trusted_keys: Sequence[KeySource] | None,
) -> tuple[BundleFile, bool]:
    keys = configured(trusted_keys, os.environ)  # before any pull: a bad key fails offline
    given = source if isinstance(source, BundleFile) else getattr(source, "file", None)
    if isinstance(given, BundleFile):  # a BundleFile, or a loader.Bundle's
        if digest is not None or cache_dir is not None:
            raise ArgumentError(
                "load_model(): digest= and cache_dir= apply to a path or an oci:// reference; "
                "pass them to loader.open() for an open bundle"
            )
        if keys:
            require(given, keys)
        return given, False
    opened = BundleFile(locate_bundle(source, digest=digest, cache_dir=cache_dir))
    try:
        if keys:
            require(opened, keys)
    except BaseException:
        opened.close()
        raise
    return opened, True


class RunnerBucket:
    """One bucket: its artifact (or the module's forward, for an eager bucket), loaded at
    first use, and on CUDA its captured graph."""

    def __init__(self, spec: ModelBucket, dims: Sequence[str], use_graphs: bool):
        self.bounds = spec.bucket
        self.full = dict(zip(dims, self.bounds, strict=True))  # each dimension's size here
        self.entry = spec.entry
        self.impl = spec.impl  # "compiled" (the artifact in entry) or "eager" (module.forward)
        self.replays = use_graphs and spec.graph  # else called directly
        # the module's own forward, called directly: the runner adds nothing (ModelRunner.__call__)
        self.module_direct = self.impl == "eager" and not self.replays
        self.serves = serving_label(self.impl, self.replays, spec.mode)
        self.lock = threading.Lock()
        self.run: Any = None  # callable(*inputs) -> list of outputs (load_artifact, eager_call)
        self.graph: Any = None
        self.inputs: list[Any] = []  # static input buffers (CUDA graphs)
        self.outputs: list[Any] = []  # static outputs of the captured graph
        self.done: Any = None  # event: the last call's copies out of ``outputs`` finished


class ModelRunner:
    """Callable: ``runner(*inputs)`` returns what the module's forward would (a tensor or a
    tuple of tensors). Thread-safe: a lock per bucket (none for a bucket the module serves
    directly: the runner keeps no state for it); on CUDA an event orders uses of a bucket's
    buffers from different streams."""

    def __init__(
        self, file: BundleFile, manifest: Manifest, spec: ModelSpec, module: Any,
        *, cuda_graphs: bool = True, copy_outputs: bool = True,
    ):  # fmt: skip
        torch = _torch()
        self.torch = torch
        self.file = file
        self.spec = spec
        self._owned = False
        self.device = module_device(module, file)
        self.artifacts = choose_artifacts(manifest, spec, self.device, torch, file)
        self.use_graphs = cuda_graphs and self.device.type == "cuda"
        self.copy_outputs = copy_outputs
        self.weights = bind_weights(spec, module, self.device, torch, file)
        self.module = module  # serves the buckets built as eager
        self._dtypes = [getattr(torch, TORCH_NAMES[i.dtype]) for i in spec.inputs]
        self._single = spec.single_output
        self._buckets = [
            RunnerBucket(b, spec.dims, self.use_graphs) for b in self.artifacts.buckets
        ]
        # input shapes, dtypes and devices -> (bucket, sizes, padded): inputs like ones
        # seen before skip every check and the bucket search
        self._routes: dict[tuple[Any, ...], tuple[RunnerBucket, dict[str, int], bool]] = {}

    def __repr__(self) -> str:
        ins = ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in self.spec.inputs)
        return (f"<aotc model {self.spec.name}({ins}) on {self.artifacts.target}, "
                f"{len(self._buckets)} buckets>")  # fmt: skip

    # --- dispatch ---------------------------------------------------------------------

    def sizes(self, inputs: Sequence[Any]) -> dict[str, int]:
        """Each dimension's size in this call, checked against the inputs' declared shapes."""
        spec = self.spec
        if len(inputs) != len(spec.inputs):
            raise ArgumentError(
                f"{spec.name}() takes {len(spec.inputs)} inputs "
                f"({', '.join(i.name for i in spec.inputs)}), got {len(inputs)}"
            )
        sizes: dict[str, int] = {}
        for x, inp, dt in zip(inputs, spec.inputs, self._dtypes, strict=True):
            if not isinstance(x, self.torch.Tensor):
                raise ArgumentError(f"{spec.name}(): {inp.name} must be a tensor")
            if x.dtype != dt:
                raise ArgumentError(f"{spec.name}(): {inp.name} has dtype {x.dtype}, "
                                    f"expected {dt}")  # fmt: skip
            if x.device != self.device:
                raise ArgumentError(f"{spec.name}(): {inp.name} is on {x.device}, the model "
                                    f"on {self.device}")  # fmt: skip
            if x.dim() != len(inp.shape):
                raise ArgumentError(f"{spec.name}(): {inp.name} has {x.dim()} dimensions, "
                                    f"expected {list(inp.shape)}")  # fmt: skip
            for n, sym in zip(x.shape, inp.shape, strict=True):
                if isinstance(sym, int):
                    if n != sym:
                        raise ArgumentError(f"{spec.name}(): {inp.name} has shape {list(x.shape)}"
                                            f", expected {list(inp.shape)}")  # fmt: skip
                elif sizes.setdefault(sym, int(n)) != n:
                    raise ArgumentError(f"{spec.name}(): dimension {sym} is {sizes[sym]} in one "
                                        f"input and {int(n)} in {inp.name}")  # fmt: skip
        return sizes

    @property
    def grid(self) -> BucketGrid:
        """The model's buckets: a dimension in the recipe's ``pad`` takes any size up to
        its last bucket, any other only the bucket sizes."""
        spec = self.spec
        return model_grid(spec.dims, spec.buckets, spec.pad, f"model {spec.name!r}")

    def bucket_for(self, sizes: Mapping[str, int]) -> RunnerBucket:
        return self._buckets[self.grid.index([sizes[d] for d in self.spec.dims])]

    # --- calls ------------------------------------------------------------------------

    def route(self, inputs: Sequence[Any]) -> tuple[RunnerBucket, dict[str, int], bool]:
        """The bucket a call on ``inputs`` is served by, each dimension's size, and whether
        the inputs are padded up to it: the first step of every call, public so that its
        cost can be measured (benchmarks/model_call_overhead.py)."""
        # The per-call path: a shape, dtype and device seen before is one dict lookup (a
        # GPU-bound call served directly pays this before its first kernel starts).
        try:
            if len(inputs) == 1:  # the usual case, in half the time of the general one
                x = inputs[0]
                key: tuple[Any, ...] = (x.shape, x.dtype, x.device)
            else:
                key = tuple((x.shape, x.dtype, x.device) for x in inputs)
        except AttributeError:  # not a tensor: sizes() says so
            key = ()
        route = self._routes.get(key)
        if route is not None:
            return route
        sizes = self.sizes(inputs)  # every check, with its message
        index, exact = self.grid.locate([sizes[d] for d in self.spec.dims])
        b, padded = self._buckets[index], not exact
        if len(self._routes) < 4096:
            self._routes[key] = (b, sizes, padded)
        return b, sizes, padded

    def __call__(self, *inputs: Any) -> Any:
        b, sizes, padded = self.route(inputs)
        torch = self.torch
        grad = torch.is_grad_enabled()  # a service usually calls with it off already
        if b.module_direct and not grad:
            # The module itself, on the caller's tensors, unpadded: nothing of the runner's
            # is shared, so no lock. The shortest path there is, because the buckets served
            # this way are GPU-bound ones, where every µs of host time before the first
            # kernel starts adds to the latency (benchmarks/model_call_overhead.py).
            out = self.module(*inputs)
            return out if self._single or isinstance(out, tuple) else tuple(out)
        if grad:
            torch.set_grad_enabled(False)
        try:
            with b.lock:
                outs = self._call(b, inputs, sizes, padded)
        finally:
            if grad:
                torch.set_grad_enabled(True)
        return outs[0] if self._single else tuple(outs)

    def _call(
        self, b: RunnerBucket, inputs: Sequence[Any], sizes: Mapping[str, int], padded: bool
    ) -> list[Any]:
        """One call of bucket ``b``; the caller holds b.lock, with autograd off."""
        self._ensure(b)
        if b.replays:
            return self._replay(b, inputs, sizes, padded)
        if b.impl == "eager":  # the module itself: any size, no padding, fresh outputs
            return b.run(*inputs)  # type: ignore[no-any-return]
        args = list(inputs)
        if padded:
            args = [pad_zeros(self.torch, x, concrete(i.shape, b.full))
                    for x, i in zip(args, self.spec.inputs, strict=True)]  # fmt: skip
        # fresh tensors every call: copied only to make a padded slice contiguous
        return [self._slice(o, i, sizes, padded, padded) for i, o in enumerate(b.run(*args))]

    def _slice(self, out: Any, i: int, sizes: Mapping[str, int], padded: bool,
               copy: bool = True) -> Any:  # fmt: skip
        """The call's part of output ``i`` (the bucket's, less the padding); a copy unless
        ``copy`` is false."""
        if padded and self.spec.outputs:
            out = out[leading(concrete(self.spec.outputs[i], sizes))]
        return out.clone() if copy else out

    def _replay(
        self, b: RunnerBucket, inputs: Sequence[Any], sizes: Mapping[str, int], padded: bool
    ) -> list[Any]:
        torch = self.torch
        stream = torch.cuda.current_stream(self.device)
        if b.done is not None:
            stream.wait_event(b.done)  # another stream's copies out of b.outputs
        for buf, x in zip(b.inputs, inputs, strict=True):
            if tuple(buf.shape) == tuple(x.shape):
                buf.copy_(x)
            else:
                buf.zero_()
                buf[leading(x.shape)].copy_(x)
        b.graph.replay()
        outs = [self._slice(o, i, sizes, padded, self.copy_outputs)
                for i, o in enumerate(b.outputs)]  # fmt: skip
        if b.done is None:
            b.done = torch.cuda.Event()
        b.done.record(stream)
        return outs

    # --- loading ------------------------------------------------------------------------

    def _ensure(self, b: RunnerBucket) -> None:
        """Load the bucket's artifact (and capture its graph); the caller holds b.lock."""
        if b.run is None:
            b.run = self._callable(b)
        if b.replays and b.graph is None:
            self._capture(b)

    def _callable(self, b: RunnerBucket) -> Any:
        """What serves bucket ``b``: the module's forward (eager) or its artifact, loaded."""
        return eager_call(self.module) if b.impl == "eager" else self._load(b.entry)

    def _capture(self, b: RunnerBucket) -> None:
        b.inputs = [
            self.torch.zeros(concrete(i.shape, b.full), dtype=dt, device=self.device)
            for i, dt in zip(self.spec.inputs, self._dtypes, strict=True)
        ]  # fmt: skip
        b.graph, b.outputs = capture_graph(self.torch, b.run, b.inputs, self.device)

    def _load(self, entry: str) -> Any:
        torch = self.torch
        names = [w.name for w in self.spec.weights]
        try:
            return load_artifact(torch, self.artifacts.backend, self.file.read_entry(entry),
                                 self.weights, names, self.device)  # fmt: skip
        except Exception as exc:  # torch asserts on a foreign artifact; say what it is
            raise BundleError(f"{self.file.path}: entry {entry!r} does not load into this "
                              f"torch {torch.__version__}: {exc!r}") from exc  # fmt: skip

    def warmup(self, **sizes: int | Iterable[int]) -> int:
        """Load (and on CUDA capture) buckets now instead of at first use: every bucket, or
        those holding the given sizes (``warmup(batch=[1, 8])``; every bucket of a
        dimension not given). Returns how many buckets are ready for them
        (loader/buckets.py: ``warm``)."""
        with self.torch.no_grad():
            return warm(self.grid, sizes, self._ready)

    def load_bucket(self, index: int) -> None:
        """Load bucket ``index``'s artifact (an eager bucket: take the module's forward) now,
        capturing nothing: the first half of ``warmup``, to time loading and capture apart
        (benchmarks/model_load_profile.py). ``grid`` numbers the buckets."""
        b = self._buckets[index]
        with b.lock:
            if b.run is None:
                b.run = self._callable(b)

    def _ready(self, index: int) -> list[RunnerBucket]:
        b = self._buckets[index]
        with b.lock:
            self._ensure(b)
        return [b]

    def close(self) -> None:
        for b in self._buckets:
            with b.lock:
                b.graph = b.run = None
                b.inputs, b.outputs = [], []
        if self._owned:
            self.file.close()
