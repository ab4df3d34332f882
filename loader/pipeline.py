"""Pipelines: a bundle's kernel sequence captured once per bucket as a CUDA graph, replayed.

CUDA graphs cannot be saved to disk, so a bundle ships the plan (loader/manifest.py:
PipelineSpec) and the loader captures it, through the driver API, the first time a call
needs a bucket (or at ``warmup``); loader/graph.py holds one bucket's graph and buffers.
Weights are bound by address when the pipeline is made, so the graphs read them in place.

This module is the caller's side: it checks a call's tensors (dtype, shape, layout; a
torch tensor of an already-accepted dtype in a few attribute reads), reads the bucket
dimensions off the inputs' first axes, picks the smallest bucket that holds them (a size
between buckets is padded up: rows past the call's size hold earlier data and are never
returned; a size past the last bucket is refused: loader/buckets.py, ``pipeline_grid``),
allocates outputs the caller did not pass, and hands the call to the bucket's graph on
the caller's stream (PyTorch's current one by default).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import args as _args
from .buckets import BucketGrid, pipeline_grid, warm
from .errors import ArgumentError, BundleError
from .expr import ExprError, compile_function, parse
from .graph import BucketGraph, StepCall
from .manifest import PipelineSpec
from .ports import Port, checked

if TYPE_CHECKING:
    from .bundle import Bundle


# The roles a pipeline's caller binds once, at load: weights, and state (a KV cache: read
# and written by the steps, kept across calls).
BOUND = ("weight", "state")


class Pipeline:
    """``pipeline(*inputs, *outputs, stream=None)``: run the pipeline on the caller's tensors.

    Inputs (and outputs, if given) go in the order the recipe declares them, or by name.
    Outputs not given are allocated like the first input (torch tensors). Returns the
    outputs: one tensor, or a tuple when the pipeline has several.
    """

    def __init__(self, bundle: Bundle, spec: PipelineSpec, weights: Mapping[str, Any]):
        self.bundle = bundle
        self.spec = spec
        self.name = spec.name
        self.dims = spec.dims
        self.buckets: dict[str, tuple[int, ...]] = dict(zip(spec.dims, spec.buckets, strict=True))
        self.grid: BucketGrid = pipeline_grid(spec.dims, spec.buckets, f"pipeline {self.name!r}")
        self.inputs = tuple(t.name for t in spec.tensors if t.role == "input")
        self.outputs = tuple(t.name for t in spec.tensors if t.role == "output")
        self._ports_in = [Port(spec.tensor(n), spec.dims) for n in self.inputs]
        self._ports_out = [Port(spec.tensor(n), spec.dims) for n in self.outputs]
        # For each dimension, the first input whose leading axis it is (the recipe's
        # checker guarantees one exists).
        self._dim_source = tuple(
            next(i for i, p in enumerate(self._ports_in) if p.dim == d)
            for d in range(len(self.dims))
        )
        self._weights, self._keep = self._bind_weights(weights)
        self._steps = [self._prepare_step(i) for i in range(len(spec.steps))]
        self._graphs: dict[int, BucketGraph] = {}  # by bucket index (self.grid)
        self._lock = threading.Lock()
        self._capture_stream = 0
        self._n_given = len(self.inputs) + len(self.outputs)
        # (input, dimension) pairs to check against the dimension's source input
        self._dim_checks = tuple(
            (i, p.dim)
            for i, p in enumerate(self._ports_in)
            if p.dim >= 0 and self._dim_source[p.dim] != i
        )
        self._stream = _args.CurrentStream(bundle.device.ordinal)
        self._closed = False

    def __repr__(self) -> str:
        ins = ", ".join(p.name + p.describe(self.dims) for p in self._ports_in)
        outs = ", ".join(p.name + p.describe(self.dims) for p in self._ports_out)
        return f"<aotc pipeline {self.name}({ins}) -> ({outs}), buckets {self.buckets}>"

    # -- building -----------------------------------------------------------------------

    def _bind_weights(self, weights: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, Any]]:
        names = [t.name for t in self.spec.tensors if t.role in BOUND]
        what = (
            "weights" if all(t.role != "state" for t in self.spec.tensors) else "weights and state"
        )
        unknown = [w for w in weights if w not in names]
        if unknown:
            raise ArgumentError(
                f"pipeline {self.name!r} has no weight {unknown[0]!r}; its {what} are: "
                f"{', '.join(names) or 'none'}"
            )
        missing = [w for w in names if w not in weights]
        if missing:
            raise ArgumentError(
                f"pipeline {self.name!r} needs its {what} bound: pass "
                + ", ".join(f"{w}=<tensor {self._shape_text(w)}>" for w in missing)
            )
        addrs = {}
        for name in names:
            t = self.spec.tensor(name)
            shape = tuple(int(s) for s in t.shape)
            addr, _ = checked(weights[name], name, t.dtype, self.name)
            have = _args.shape_of(weights[name])
            if have is not None and have != shape:
                raise ArgumentError(
                    f"pipeline {self.name!r}: weight {name!r} has shape {list(have)}; "
                    f"expected {list(shape)}"
                )
            addrs[name] = addr
        # The graph reads the weights in place: keep them alive as long as the pipeline.
        return addrs, dict(weights)

    def _shape_text(self, name: str) -> str:
        t = self.spec.tensor(name)
        return f"[{', '.join(t.shape)}] {t.dtype}"

    def _prepare_step(self, index: int) -> tuple[Any, list[Any], Any]:
        """The step's kernel, per argument how to produce its value for a bucket, and its
        condition (None: every bucket)."""
        step = self.spec.steps[index]
        where = f"pipeline {self.name!r} step {index} ({step.kernel})"
        try:
            kernel = self.bundle.kernel(step.kernel)
        except KeyError:
            raise BundleError(f"{where}: the bundle has no kernel {step.kernel!r}") from None
        # The parameters' values, then the call values' (integer expressions)
        names = [p.name for p in kernel.params] + [c.name for c in kernel.spec.call]
        if len(step.args) != len(names) or kernel.spec.host:
            raise BundleError(f"{where}: {len(step.args)} arguments for {len(names)}")
        makers: list[Any] = []
        pointers = {i for i, p in enumerate(kernel.params) if p.is_pointer}
        for i, a in enumerate(step.args):
            if i in pointers:
                if not isinstance(a, str) or a not in {t.name for t in self.spec.tensors}:
                    raise BundleError(f"{where}: {names[i]} names no tensor ({a!r})")
                makers.append(("tensor", a))
            elif isinstance(a, str):
                try:
                    fn = compile_function([parse(a)], list(self.dims))
                except ExprError as exc:
                    raise BundleError(f"{where}: {names[i]}: {exc}") from None
                makers.append(("int", fn))
            else:
                makers.append(("number", a))
        if step.when is None:
            return kernel, makers, None
        return kernel, makers, compile_function([parse(step.when, predicate=True)], list(self.dims))

    # -- capture ------------------------------------------------------------------------

    def warmup(self, **sizes: int | Iterable[int]) -> int:
        """Capture buckets now instead of at first use: every bucket, or those holding the
        given sizes (``warmup(M=[1, 16])``; every bucket of a dimension not given). Returns
        how many graphs are ready for them (loader/buckets.py: ``warm``)."""
        return warm(self.grid, sizes, lambda index: [self._graph(index)])

    def _graph(self, index: int) -> BucketGraph:
        g = self._graphs.get(index)
        if g is None:
            with self._lock:
                g = self._graphs.get(index)
                if g is None:
                    if self._closed:
                        raise ArgumentError(f"pipeline {self.name!r} is closed")
                    g = self._graphs[index] = self._capture(index)
        return g

    def _capture(self, index: int) -> BucketGraph:
        env = self.grid.bounds_of(index)
        named_env = dict(zip(self.dims, env, strict=True))
        sizes = {}
        for t in self.spec.tensors:
            if t.role not in BOUND:
                n = _args.ITEMSIZE[t.dtype]
                for s in t.shape:
                    n *= parse(s).evaluate(named_env)
                sizes[t.name] = n
        device = self.bundle.device
        if not self._capture_stream:
            device.make_current()
            self._capture_stream = device.drv.stream_create()
        return BucketGraph.capture(
            device, self.name, sizes, self._weights,
            lambda addrs: self._resolve(addrs, env),
            ([(p.name, p.row_bytes, p.pad) for p in self._ports_in],
             [(p.name, p.row_bytes) for p in self._ports_out]),
            self._capture_stream,
        )  # fmt: skip

    def _resolve(self, addrs: Mapping[str, int], env: tuple[int, ...]) -> list[StepCall]:
        """Each step's launcher and argument values at this bucket, its module loaded, and
        which values are the addresses of inputs or outputs (for binding)."""
        ports = {name: i for i, name in enumerate(self.inputs + self.outputs)}
        named_env = dict(zip(self.dims, env, strict=True))
        calls = []
        for kernel, makers, when in self._steps:
            if when is not None and not when(*env)[0]:
                continue  # the step does not run at this bucket
            values: list[Any] = []
            seen: dict[int, str] = {}
            slots = []
            described = set(kernel.spec.descriptors)
            for i, (kind, what) in enumerate(makers):
                if kind == "tensor":
                    t = self.spec.tensor(what)
                    if kernel.params[i].name in described:  # as descriptors.tensor gives it
                        shape = tuple(parse(s).evaluate(named_env) for s in t.shape)
                        strides = tuple(math.prod(shape[j + 1 :]) for j in range(len(shape)))
                        values.append((addrs[what], shape, strides))
                    else:
                        values.append(addrs[what])
                    seen[i] = t.dtype
                    if what in ports:
                        slots.append((i, ports[what]))
                elif kind == "int":
                    values.append(what(*env)[0])
                else:
                    values.append(what)
            inst = kernel._instance(seen, None)
            launcher = kernel.select(values, inst)[1]
            launcher.load()  # module loads are not stream work: do them outside the capture
            calls.append((launcher, values, slots))
        return calls

    @property
    def binds(self) -> dict[tuple[int, ...], bool]:
        """Per captured bucket (by its upper bounds), whether exact-size calls bind the
        caller's tensors (True) or copy (False: the driver could not map the graph's
        nodes)."""
        return {self.grid.bounds_of(i): g.binds for i, g in sorted(self._graphs.items())}

    # -- calls --------------------------------------------------------------------------

    def __call__(self, *tensors: Any, stream: Any = None, **named: Any) -> Any:
        given: Sequence[Any] = (
            tensors if not named and len(tensors) == self._n_given else self._gather(tensors, named)
        )
        # (address, leading size) per input; each dimension's size read off its input
        srcs = [self._accept(given[i], port) for i, port in enumerate(self._ports_in)]
        sizes = [srcs[i][1] for i in self._dim_source]
        for i, d in self._dim_checks:
            if srcs[i][1] != sizes[d]:
                raise ArgumentError(
                    f"pipeline {self.name!r}: input {self._ports_in[i].name!r} has "
                    f"{srcs[i][1]} rows, but {self.dims[d]}={sizes[d]} from "
                    f"{self._ports_in[self._dim_source[d]].name!r}"
                )
        if 0 in sizes:  # an empty batch: nothing to run
            outs = self._outputs(given, sizes)
            return outs[0] if len(outs) == 1 else tuple(outs)
        # exact: the call's sizes are its bucket's, so nothing is padded or copied
        index, exact = self.grid.locate(sizes)
        outs = self._outputs(given, sizes)
        dsts = []
        for port, out in zip(self._ports_out, outs, strict=True):
            addr, lead = self._accept(out, port)
            want = sizes[port.dim] if port.dim >= 0 else port.fixed_lead
            if lead != want:
                raise ArgumentError(f"pipeline {self.name!r}: output {port.name!r} has {lead} "
                                    f"rows; expected {want}")  # fmt: skip
            dsts.append((addr, lead))
        handle = self._stream() if stream is None else _args.stream_handle(stream)
        (self._graphs.get(index) or self._graph(index)).run(srcs, dsts, handle, exact)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _gather(self, tensors: Sequence[Any], named: Mapping[str, Any]) -> list[Any]:
        order = self.inputs + self.outputs
        if len(tensors) > len(order):
            raise ArgumentError(f"pipeline {self.name!r} takes {', '.join(order)}; got "
                                f"{len(tensors)} tensors")  # fmt: skip
        given: list[Any] = list(tensors) + [None] * (len(order) - len(tensors))
        for name, value in named.items():
            if name not in order:
                raise ArgumentError(f"pipeline {self.name!r} has no input or output {name!r}; "
                                    f"it takes {', '.join(order)}")  # fmt: skip
            i = order.index(name)
            if given[i] is not None:
                raise ArgumentError(f"pipeline {self.name!r}: {name!r} given twice")
            given[i] = value
        missing = [n for n, v in zip(self.inputs, given, strict=False) if v is None]
        if missing:
            raise ArgumentError(f"pipeline {self.name!r}: missing input {missing[0]!r} "
                                f"({self._shape_text(missing[0])})")  # fmt: skip
        return given

    def _accept(self, obj: Any, port: Port) -> tuple[int, int]:
        """The tensor's address and leading size, after checking dtype, shape, layout.
        A torch tensor of a dtype already accepted takes the first branch: a handful of
        attribute reads, no string work."""
        try:
            shape = obj.shape
            if (
                obj.dtype is port.dtype_obj
                and obj.is_cuda
                and shape[1:] == port.rest
                and (port.dim >= 0 or shape[0] == port.fixed_lead)
                and obj.is_contiguous()
                and shape[0]
            ):
                return obj.data_ptr(), shape[0]
        except (AttributeError, TypeError, IndexError):
            pass
        return self._acceptchecked(obj, port)

    def _acceptchecked(self, obj: Any, port: Port) -> tuple[int, int]:
        shape = _args.shape_of(obj)
        if (
            shape is None
            or shape[1:] != port.rest
            or (port.dim < 0 and shape[0] != port.fixed_lead)
        ):
            raise ArgumentError(
                f"pipeline {self.name!r}: {port.name!r} has shape "
                f"{'unknown' if shape is None else list(shape)}; expected "
                f"{port.describe(self.dims)}"
            )
        if shape[0] == 0:
            return 0, 0  # an empty batch has no data pointer and runs nothing
        addr, have = checked(obj, port.name, port.dtype, self.name)
        if have is not None:
            port.dtype_obj = getattr(obj, "dtype", None)
        return addr, shape[0]

    def _outputs(self, given: Sequence[Any], sizes: list[int]) -> list[Any]:
        outs = list(given[len(self.inputs) :])
        if not any(o is None for o in outs):
            return outs
        like = given[0]
        torch = sys.modules.get("torch")
        if torch is None or not hasattr(like, "new_empty"):
            raise ArgumentError(
                f"pipeline {self.name!r}: pass the outputs ({', '.join(self.outputs)}); "
                "they are allocated for you only when the inputs are torch tensors"
            )
        for i, port in enumerate(self._ports_out):
            if outs[i] is None:
                lead = sizes[port.dim] if port.dim >= 0 else port.fixed_lead
                dtype = getattr(torch, _args.TORCH_NAMES[port.dtype])
                outs[i] = like.new_empty((lead, *port.rest), dtype=dtype)
        return outs

    # -- inspection and teardown ----------------------------------------------------------

    @property
    def captured(self) -> list[dict[str, int]]:
        """The buckets with a graph, as dimension -> upper bound."""
        return [self.grid.named(i) for i in sorted(self._graphs)]

    @property
    def memory(self) -> int:
        """Device bytes held for captured buckets' buffers."""
        return sum(g.size for g in self._graphs.values())

    def close(self) -> None:
        """Free every graph, event and buffer; the pipeline cannot be called afterwards."""
        with self._lock:
            self._closed = True
            drv = self.bundle.device.drv
            if self._graphs:
                drv.synchronize()  # replays still queued read these buffers
            for g in self._graphs.values():
                g.close()
            self._graphs.clear()
            if self._capture_stream:
                drv.stream_destroy(self._capture_stream)
                self._capture_stream = 0
