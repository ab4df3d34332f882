"""Pipelines: a bundle's kernel sequence captured once per bucket as a CUDA graph, replayed.

CUDA graphs cannot be saved to disk, so a bundle ships the plan (loader/manifest.py:
PipelineSpec) and this module captures it, through the driver API, the first time a call
needs a bucket (or at ``warmup``). Each bucket owns static device buffers for the
pipeline's inputs, outputs and scratch, allocated once; weights are bound by address when
the pipeline is made, so the graph reads them in place. A call copies its inputs into the
bucket's buffers (a size between buckets is padded up: rows past the call's size hold
earlier data and are never returned), replays the graph and copies the call's rows of
each output out, all on the caller's stream. A call whose size is exactly a bucket's
needs no copies: the graph's kernel nodes that read its inputs or write its outputs are
pointed at the caller's tensors instead (cuGraphExecKernelNodeSetParams; nothing at all
when the caller passes the same tensors as last time, as a serving loop does).

Threads: a bucket's buffers are shared, so each bucket serializes its uses on the GPU: a
call records an event after its last copy, and a call on another stream waits for it
first. The host work of one call (a few driver calls) runs under the bucket's lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import sys
import threading
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import args as _args
from .driver import CUDA_ERROR_INVALID_CONTEXT, KernelNodeParams
from .errors import ArgumentError, BundleError, CudaError
from .expr import ExprError, compile_function, parse
from .fastcall import ParamBuffer
from .manifest import PipelineSpec, PipelineTensor

if TYPE_CHECKING:
    from .bundle import Bundle, Launcher

ITEMSIZE = {
    "i1": 1, "i8": 1, "u8": 1, "fp8e4nv": 1, "fp8e5": 1,
    "i16": 2, "u16": 2, "fp16": 2, "bf16": 2,
    "i32": 4, "u32": 4, "fp32": 4,
    "i64": 8, "u64": 8, "fp64": 8,
}  # fmt: skip
# torch's names for our element types, to allocate outputs when the caller gives none.
_TORCH_NAMES = {
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
    "i1": "bool", "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2",
}  # fmt: skip
_ALIGN = 256  # what cuMemAlloc guarantees; every buffer in an arena starts on it
# A step at one bucket: launcher, argument values, (value position, input/output index).
_Call = tuple["Launcher", list[Any], list[tuple[int, int]]]


class _Port:
    """An input or output: where a call's tensor goes, and how to check it."""

    def __init__(self, t: PipelineTensor, dims: Sequence[str]):
        self.name = t.name
        self.dtype = t.dtype
        lead = t.shape[0]
        # Which dimension the first axis is (-1: a fixed size), and the fixed rest.
        self.dim = dims.index(lead) if lead in dims else -1
        self.fixed_lead = -1 if self.dim >= 0 else int(lead)
        self.rest = tuple(int(s) for s in t.shape[1:])
        row = ITEMSIZE[t.dtype]
        for s in self.rest:
            row *= s
        self.row_bytes = row
        # The caller's dtype object (a torch.dtype) once a full check accepted it: later
        # calls compare identities instead of names.
        self.dtype_obj: Any = None

    def describe(self, dims: Sequence[str]) -> str:
        lead = dims[self.dim] if self.dim >= 0 else str(self.fixed_lead)
        return f"[{', '.join([lead, *map(str, self.rest)])}] {self.dtype}"


class _Graph:
    """One bucket: its buffers, the instantiated graph and the event that orders uses."""

    def __init__(
        self,
        arena: int,
        size: int,
        addrs: dict[str, int],
        exec_: int,
        event: int,
        ports: tuple[list[_Port], list[_Port]],
        graph: int = 0,
        bindings: list[_Binding] | None = None,
    ):
        self.arena, self.size, self.addrs = arena, size, addrs
        self.graph = graph  # kept: its nodes name the instantiated graph's nodes
        # The nodes that touch inputs or outputs (None: cannot be rebound, always copy),
        # and the caller addresses they are bound to now (None: the bucket's own buffers).
        self.bindings = bindings
        self.bound: tuple[int, ...] | None = None
        # (buffer address, bytes per row) of each input and each output, in call order
        self.ins = [(addrs[p.name], p.row_bytes) for p in ports[0]]
        self.outs = [(addrs[p.name], p.row_bytes) for p in ports[1]]
        self.exec = exec_
        self.event = event
        self.last_stream: int | None = None
        self.lock = threading.Lock()


class _Binding:
    """A graph node that reads an input or writes an output, and how to point it at a
    caller's tensors: its kernel's values with those addresses replaced, packed into a
    parameter buffer of the node's own and given to the instantiated graph."""

    def __init__(
        self, node: int, launcher: Launcher, values: list[Any], slots: list[tuple[int, int]]
    ):
        self.node = ctypes.c_void_p(node)
        self.values = values  # the bucket's own buffers
        self.slots = slots  # (value position, index into the call's inputs + outputs)
        self.buffer = ParamBuffer(
            launcher.abi_types, launcher.positions, launcher.variant.scratch_args
        )
        gx, gy, gz = launcher.grid(*values)
        self.params = KernelNodeParams(
            launcher.function, gx, gy, gz, launcher.block, 1, 1, launcher.shared,
            ctypes.addressof(self.buffer.params), None, None, None,
        )  # fmt: skip
        self.ref = ctypes.byref(self.params)

    def point(self, drv: Any, exec_: Any, addrs: Sequence[int] | None) -> int:
        """Point the node at the call's tensors (``addrs``, inputs then outputs), or back
        at the bucket's buffers (None). Returns the driver's result code."""
        values = list(self.values)
        if addrs is not None:
            for pos, which in self.slots:
                values[pos] = addrs[which]
        self.buffer.pack(values)
        code: int = drv.node_params_raw(exec_, self.node, self.ref)
        return code


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
        self.inputs = tuple(t.name for t in spec.tensors if t.role == "input")
        self.outputs = tuple(t.name for t in spec.tensors if t.role == "output")
        self._ports_in = [_Port(spec.tensor(n), spec.dims) for n in self.inputs]
        self._ports_out = [_Port(spec.tensor(n), spec.dims) for n in self.outputs]
        # For each dimension, the first input whose leading axis it is (the recipe's
        # checker guarantees one exists).
        self._dim_source = tuple(
            next(i for i, p in enumerate(self._ports_in) if p.dim == d)
            for d in range(len(self.dims))
        )
        self._weights, self._keep = self._bind_weights(weights)
        self._steps = [self._prepare_step(i) for i in range(len(spec.steps))]
        self._graphs: dict[tuple[int, ...], _Graph] = {}
        self._lock = threading.Lock()
        self._capture_stream = 0
        self._n_given = len(self.inputs) + len(self.outputs)
        self._bounds = spec.buckets
        # (input, dimension) pairs to check against the dimension's source input
        self._dim_checks = tuple(
            (i, p.dim)
            for i, p in enumerate(self._ports_in)
            if p.dim >= 0 and self._dim_source[p.dim] != i
        )
        self._drv = bundle.device.drv
        self._stream = _args.CurrentStream(bundle.device.ordinal)
        self._closed = False

    def __repr__(self) -> str:
        ins = ", ".join(p.name + p.describe(self.dims) for p in self._ports_in)
        outs = ", ".join(p.name + p.describe(self.dims) for p in self._ports_out)
        return f"<aotc pipeline {self.name}({ins}) -> ({outs}), buckets {self.buckets}>"

    # -- building -----------------------------------------------------------------------

    def _bind_weights(self, weights: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, Any]]:
        names = [t.name for t in self.spec.tensors if t.role == "weight"]
        unknown = [w for w in weights if w not in names]
        if unknown:
            raise ArgumentError(
                f"pipeline {self.name!r} has no weight {unknown[0]!r}; its weights are: "
                f"{', '.join(names) or 'none'}"
            )
        missing = [w for w in names if w not in weights]
        if missing:
            raise ArgumentError(
                f"pipeline {self.name!r} needs its weights bound: pass "
                + ", ".join(f"{w}=<tensor {self._shape_text(w)}>" for w in missing)
            )
        addrs = {}
        for name in names:
            t = self.spec.tensor(name)
            shape = tuple(int(s) for s in t.shape)
            addr, _ = _checked(weights[name], name, t.dtype, self.name)
            have = _shape(weights[name])
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

    def _prepare_step(self, index: int) -> tuple[Any, list[Any]]:
        """The step's kernel and, per argument, how to produce its value for a bucket."""
        step = self.spec.steps[index]
        where = f"pipeline {self.name!r} step {index} ({step.kernel})"
        try:
            kernel = self.bundle.kernel(step.kernel)
        except KeyError:
            raise BundleError(f"{where}: the bundle has no kernel {step.kernel!r}") from None
        if len(step.args) != len(kernel.params):
            raise BundleError(f"{where}: {len(step.args)} arguments for {len(kernel.params)}")
        makers: list[Any] = []
        for p, a in zip(kernel.params, step.args, strict=True):
            if p.is_pointer:
                if not isinstance(a, str) or a not in {t.name for t in self.spec.tensors}:
                    raise BundleError(f"{where}: {p.name} names no tensor ({a!r})")
                makers.append(("tensor", a))
            elif isinstance(a, str):
                try:
                    fn = compile_function([parse(a)], list(self.dims))
                except ExprError as exc:
                    raise BundleError(f"{where}: {p.name}: {exc}") from None
                makers.append(("int", fn))
            else:
                makers.append(("number", a))
        return kernel, makers

    # -- capture ------------------------------------------------------------------------

    def warmup(self, **dims: Sequence[int] | int) -> int:
        """Capture buckets now instead of at first use: every bucket, or those holding the
        given sizes (``warmup(M=[1, 16])``). Returns how many graphs are ready."""
        unknown = [d for d in dims if d not in self.buckets]
        if unknown:
            raise ArgumentError(f"pipeline {self.name!r} has no dimension {unknown[0]!r}; "
                                f"its dimensions: {', '.join(self.dims)}")  # fmt: skip
        choices: list[Sequence[int]] = []
        for d in self.dims:
            bounds = self.buckets[d]
            sizes = dims.get(d)
            if sizes is None:
                choices.append(range(len(bounds)))
            else:
                values = [sizes] if isinstance(sizes, int) else list(sizes)
                choices.append(sorted({self._bucket_of(d, bounds, v) for v in values}))
        for key in itertools.product(*choices):
            self._graph(key)
        return len(self._graphs)

    def _bucket_of(self, dim: str, bounds: tuple[int, ...], value: int) -> int:
        i = bisect_left(bounds, value)
        if i == len(bounds) or value < 1:
            raise ArgumentError(
                f"pipeline {self.name!r}: {dim}={value} is outside its buckets 1..{bounds[-1]}; "
                "split the call or add a larger bucket to the recipe"
            )
        return i

    def _graph(self, key: tuple[int, ...]) -> _Graph:
        g = self._graphs.get(key)
        if g is None:
            with self._lock:
                g = self._graphs.get(key)
                if g is None:
                    if self._closed:
                        raise ArgumentError(f"pipeline {self.name!r} is closed")
                    g = self._graphs[key] = self._capture(key)
        return g

    def _capture(self, key: tuple[int, ...]) -> _Graph:
        env = tuple(self.buckets[d][i] for d, i in zip(self.dims, key, strict=True))
        dev = self.bundle.device
        drv = dev.drv
        # The bucket's own buffers, one allocation, each buffer aligned.
        offsets: dict[str, int] = {}
        total = 0
        named_env = dict(zip(self.dims, env, strict=True))
        for t in self.spec.tensors:
            if t.role == "weight":
                continue
            n = ITEMSIZE[t.dtype]
            for s in t.shape:
                n *= parse(s).evaluate(named_env)
            offsets[t.name] = total
            total += -(-max(n, 1) // _ALIGN) * _ALIGN
        dev.make_current()
        arena = drv.mem_alloc(total)
        try:
            drv.memset_d8(arena, 0, total)
            addrs = {name: arena + off for name, off in offsets.items()}
            addrs.update(self._weights)
            calls = self._resolve(addrs, env)
            if not self._capture_stream:
                self._capture_stream = drv.stream_create()
            exec_, graph, bindings = self._record(calls)
            event = drv.event_create()
        except BaseException:
            drv.mem_free(arena)
            raise
        ports = (self._ports_in, self._ports_out)
        return _Graph(arena, total, addrs, exec_, event, ports, graph, bindings)

    def _resolve(self, addrs: Mapping[str, int], env: tuple[int, ...]) -> list[_Call]:
        """Each step's launcher and argument values at this bucket, its module loaded, and
        which values are the addresses of inputs or outputs (for binding)."""
        ports = {name: i for i, name in enumerate(self.inputs + self.outputs)}
        calls = []
        for kernel, makers in self._steps:
            values: list[Any] = []
            seen: dict[int, str] = {}
            slots = []
            for i, (kind, what) in enumerate(makers):
                if kind == "tensor":
                    values.append(addrs[what])
                    seen[i] = self.spec.tensor(what).dtype
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

    def _record(self, calls: list[_Call]) -> tuple[int, int, list[_Binding] | None]:
        """Capture, instantiate and upload the graph; find the nodes to bind."""
        drv = self.bundle.device.drv
        stream = self._capture_stream
        drv.begin_capture(stream)
        try:
            for launcher, values, _ in calls:
                launcher.launch(values, stream)
        except BaseException:
            with contextlib.suppress(CudaError):  # the launch error is the one to report
                drv.graph_destroy(drv.end_capture(stream))
            raise
        graph = drv.end_capture(stream)
        try:
            exec_ = drv.instantiate(graph)
            bindings = self._bindings(graph, calls)
        except BaseException:
            drv.graph_destroy(graph)
            raise
        drv.graph_upload(exec_, stream)
        drv.synchronize(stream)
        return exec_, graph, bindings

    def _bindings(self, graph: int, calls: list[_Call]) -> list[_Binding] | None:
        """The nodes of launches that touch inputs or outputs. Capturing one stream's
        launches gives one kernel node per launch (a step with an empty grid launches
        nothing), listed in launch order; unless each node's function and grid say so,
        or the driver cannot tell, the bucket always copies."""
        launched = [c for c in calls if min(c[0].grid(*c[1])) > 0]
        try:
            nodes = self.bundle.device.drv.graph_kernel_nodes(graph)
        except CudaError:
            return None
        expected = [(c[0].function, tuple(c[0].grid(*c[1]))) for c in launched]
        if [(func, grid) for _, func, grid in nodes] != expected:
            return None
        return [
            _Binding(node, launcher, values, slots)
            for (node, _, _), (launcher, values, slots) in zip(nodes, launched, strict=True)
            if slots
        ]

    @property
    def binds(self) -> dict[int, bool]:
        """Per captured bucket (by index), whether exact-size calls bind the caller's
        tensors (True) or copy (False: the driver could not map the graph's nodes)."""
        return {key[0]: g.bindings is not None for key, g in sorted(self._graphs.items())}

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
        key: list[int] = []
        exact = True  # the call's size is its bucket's: no padding, so no copies needed
        for bounds, size in zip(self._bounds, sizes, strict=False):
            b = bisect_left(bounds, size)
            if b == len(bounds):
                self._bucket_of(self.dims[len(key)], bounds, size)  # raises, naming the limit
            key.append(b)
            exact = exact and bounds[b] == size
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
        k = tuple(key)
        self._run(self._graphs.get(k) or self._graph(k), srcs, dsts, handle, exact)
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

    def _accept(self, obj: Any, port: _Port) -> tuple[int, int]:
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
        return self._accept_checked(obj, port)

    def _accept_checked(self, obj: Any, port: _Port) -> tuple[int, int]:
        shape = _shape(obj)
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
        addr, have = _checked(obj, port.name, port.dtype, self.name)
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
                dtype = getattr(torch, _TORCH_NAMES[port.dtype])
                outs[i] = like.new_empty((lead, *port.rest), dtype=dtype)
        return outs

    def _run(
        self,
        g: _Graph,
        srcs: list[tuple[int, int]],
        dsts: list[tuple[int, int]],
        stream: int,
        exact: bool,
    ) -> None:
        drv = self._drv
        copy = drv.copy_raw
        with g.lock:
            if g.last_stream != stream:
                # The buffers' previous user may be another stream: wait for its last copy.
                code = drv.wait_raw(stream, g.event, 0)
                if code == CUDA_ERROR_INVALID_CONTEXT:
                    self.bundle.device.make_current()  # a thread new to CUDA
                    code = drv.wait_raw(stream, g.event, 0)
                _check(drv, code, "cuStreamWaitEvent", self.name)
            copying = not (exact and self._bound_to(g, srcs, dsts))
            if copying:
                if g.bound is not None:
                    self._bind(g, None)
                for (buf, row), (src, lead) in zip(g.ins, srcs, strict=False):
                    code = copy(buf, src, lead * row, stream)
                    if code:
                        _check(drv, code, "cuMemcpyDtoDAsync", f"{self.name} input")
            code = drv.graph_launch_raw(g.exec, stream)
            if code:
                _check(drv, code, "cuGraphLaunch", self.name)
            if copying:
                for (buf, row), (dst, lead) in zip(g.outs, dsts, strict=False):
                    code = copy(dst, buf, lead * row, stream)
                    if code:
                        _check(drv, code, "cuMemcpyDtoDAsync", f"{self.name} output")
            code = drv.record_raw(g.event, stream)
            if code:
                _check(drv, code, "cuEventRecord", self.name)
            g.last_stream = stream

    def _bound_to(
        self, g: _Graph, srcs: list[tuple[int, int]], dsts: list[tuple[int, int]]
    ) -> bool:
        """Whether the graph now reads and writes the call's own tensors: bound already,
        or bound here. Not when the driver could not map the graph's nodes, nor for a
        tensor off 16-byte alignment (the variants may assume it of the bucket's buffers)."""
        if g.bindings is None:
            return False
        addrs = tuple([a for a, _ in srcs] + [a for a, _ in dsts])
        if g.bound == addrs:
            return True
        if any(a & 15 for a in addrs):
            return False
        self._bind(g, addrs)
        return True

    def _bind(self, g: _Graph, addrs: tuple[int, ...] | None) -> None:
        """Point the bucket's input and output nodes at ``addrs`` (None: its own buffers)."""
        assert g.bindings is not None
        g.bound = (-1,)  # unknown until every node took its new parameters
        for b in g.bindings:
            _check(self._drv, b.point(self._drv, g.exec, addrs), "cuGraphExecKernelNodeSetParams",
                   self.name)  # fmt: skip
        g.bound = addrs

    # -- inspection and teardown ----------------------------------------------------------

    @property
    def captured(self) -> list[dict[str, int]]:
        """The buckets with a graph, as dimension -> upper bound."""
        return [
            {d: self.buckets[d][i] for d, i in zip(self.dims, key, strict=True)}
            for key in sorted(self._graphs)
        ]

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
                with g.lock:
                    drv.graph_exec_destroy(g.exec)
                    drv.graph_destroy(g.graph)
                    drv.event_destroy(g.event)
                    drv.mem_free(g.arena)
            self._graphs.clear()
            if self._capture_stream:
                drv.stream_destroy(self._capture_stream)
                self._capture_stream = 0


def _checked(obj: Any, name: str, dtype: str, pipeline: str) -> tuple[int, str | None]:
    addr, have = _args.pointer(obj, name)
    if have is not None and have != dtype:
        raise ArgumentError(f"pipeline {pipeline!r}: {name!r} has element type {have}, "
                            f"expected {dtype}")  # fmt: skip
    if not _contiguous(obj):
        raise ArgumentError(f"pipeline {pipeline!r}: {name!r} must be contiguous "
                            "(row-major); pass .contiguous()")  # fmt: skip
    return addr, have


def _shape(obj: Any) -> tuple[int, ...] | None:
    shape = getattr(obj, "shape", None)
    if shape is None:
        cai = getattr(obj, "__cuda_array_interface__", None)
        shape = cai.get("shape") if isinstance(cai, dict) else None
    return None if shape is None else tuple(int(s) for s in shape)


def _contiguous(obj: Any) -> bool:
    is_contiguous: Callable[[], bool] | None = getattr(obj, "is_contiguous", None)
    if is_contiguous is not None:
        return bool(is_contiguous())
    cai = getattr(obj, "__cuda_array_interface__", None)
    return not isinstance(cai, dict) or cai.get("strides") is None


def _check(drv: Any, code: int, call: str, what: str) -> None:
    if code:
        drv.check(code, call, f"pipeline {what}")
