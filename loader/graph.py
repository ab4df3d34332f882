"""One bucket of a pipeline as a CUDA graph: its buffers, its capture, how a call runs it.

``BucketGraph.capture`` allocates the bucket's static buffers (one device allocation,
each buffer 256-byte aligned, zeroed), launches the steps on a capture stream in
thread-local capture mode, instantiates the graph and uploads it. ``run`` replays it on
the caller's stream: the inputs' rows are copied into the buffers first and the outputs'
rows copied out after, unless the call's size is the bucket's own; then the graph's
kernel nodes that read inputs or write outputs are pointed at the caller's tensors
(cuGraphExecKernelNodeSetParams) and nothing is copied; when the same tensors come back,
nothing is changed either.

A bucket's buffers are shared by every caller, so its uses are serialized on the GPU: a
run records an event after its last operation, and a run on another stream waits for it
first. The host side of a run holds the bucket's lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .driver import CUDA_ERROR_INVALID_CONTEXT, KernelNodeParams
from .errors import CudaError
from .fastcall import ParamBuffer

if TYPE_CHECKING:
    from .device import Device
    from .launch import Launcher

_ALIGN = 256  # what cuMemAlloc guarantees; every buffer in an arena starts on it
# A step at one bucket: its launcher, its argument values, and which of those values are
# the addresses of the call's tensors, as (value position, index into inputs + outputs).
StepCall = tuple["Launcher", list[Any], list[tuple[int, int]]]
# Where a call's tensor is: (address, rows).
Rows = tuple[int, int]


class _Binding:
    """A graph node that reads an input or writes an output, and how to point it at a
    caller's tensors: its kernel's values with those addresses replaced, packed into a
    parameter buffer of the node's own and given to the instantiated graph."""

    def __init__(
        self,
        node: int,
        launcher: Launcher,
        values: list[Any],
        slots: list[tuple[int, int]],
        stream: int,
    ):
        self.node = ctypes.c_void_p(node)
        self.launcher, self.stream = launcher, stream
        self.values = values  # the bucket's own buffers
        self.slots = slots
        self.buffer = ParamBuffer(launcher.abi_types, launcher.positions, launcher.scratch_slots)
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
                old = values[pos]  # an address, or a descriptor's (address, shape, strides)
                values[pos] = (addrs[which], *old[1:]) if type(old) is tuple else addrs[which]
        # A descriptor's tensor map is encoded again for the new address; global scratch
        # stays the buffer reserved for the capture's stream.
        self.buffer.pack(self.launcher.slot_values(values, self.stream))
        code: int = drv.node_params_raw(exec_, self.node, self.ref)
        return code


class BucketGraph:
    """A captured bucket. ``ins``: (buffer address, bytes per row, rows, address of the
    same rows of pad values or 0) of each input; ``outs``: (buffer address, bytes per row)
    of each output; in call order."""

    def __init__(
        self,
        device: Device,
        name: str,
        arena: int,
        size: int,
        exec_: int,
        graph: int,
        bindings: list[_Binding] | None,
        ins: list[tuple[int, int, int, int]],
        outs: list[tuple[int, int]],
    ):
        self.device, self.name = device, name
        self.arena, self.size = arena, size
        self.exec = exec_
        self.graph = graph  # kept: its nodes name the instantiated graph's nodes
        # The nodes that touch inputs or outputs (None: they could not be mapped, so the
        # bucket always copies), and the addresses they point at now (None: its buffers).
        self.bindings = bindings
        self.bound: tuple[int, ...] | None = None
        self.ins, self.outs = ins, outs
        self.event = device.drv.event_create()
        self.last_stream: int | None = None
        self.lock = threading.Lock()

    @staticmethod
    def capture(
        device: Device,
        name: str,
        sizes: Mapping[str, int],
        fixed: Mapping[str, int],
        resolve: Callable[[Mapping[str, int]], list[StepCall]],
        ports: tuple[Sequence[tuple[str, int, bytes | None]], Sequence[tuple[str, int]]],
        stream: int,
    ) -> BucketGraph:
        """Allocate a buffer of ``sizes[t]`` bytes per tensor, ask ``resolve`` for the steps
        given every tensor's address (``fixed`` ones, the weights, included), capture them
        on ``stream``. ``ports``: (name, bytes per row, one pad element or None) of the
        inputs, then (name, bytes per row) of the outputs. A padded input gets a second
        buffer of its size holding the pad value, copied from at calls."""
        drv = device.drv
        pads = {t: pad for t, _, pad in ports[0] if pad is not None}
        regions = dict(sizes) | {(t, "pad"): sizes[t] for t in pads}
        offsets, total = {}, 0
        for region, nbytes in regions.items():
            offsets[region] = total
            total += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        device.make_current()
        arena = drv.mem_alloc(total)
        try:
            drv.memset_d8(arena, 0, total)
            for t, pad in pads.items():
                drv.memcpy_htod(arena + offsets[(t, "pad")], pad * (sizes[t] // len(pad)))
            addrs = {t: arena + offsets[t] for t in sizes} | dict(fixed)
            calls = resolve(addrs)
            exec_, graph, bindings = _record(drv, stream, calls)
            try:
                return BucketGraph(
                    device, name, arena, total, exec_, graph, bindings,
                    [(addrs[t], row, sizes[t] // max(row, 1),
                      arena + offsets[(t, "pad")] if t in pads else 0)
                     for t, row, _ in ports[0]],
                    [(addrs[t], row) for t, row in ports[1]],
                )  # fmt: skip
            except BaseException:
                drv.graph_exec_destroy(exec_)
                drv.graph_destroy(graph)
                raise
        except BaseException:
            drv.mem_free(arena)
            raise

    @property
    def binds(self) -> bool:
        return self.bindings is not None

    def run(self, srcs: list[Rows], dsts: list[Rows], stream: int, exact: bool) -> None:
        """Replay for a call whose inputs are ``srcs`` and outputs ``dsts`` on ``stream``;
        ``exact``: the call's size is the bucket's, so its tensors may be bound."""
        drv = self.device.drv
        copy = drv.copy_raw
        with self.lock:
            if self.last_stream != stream:
                # The buffers' previous user may be another stream: wait for its last copy.
                code = drv.wait_raw(stream, self.event, 0)
                if code == CUDA_ERROR_INVALID_CONTEXT:
                    self.device.make_current()  # a thread new to CUDA
                    code = drv.wait_raw(stream, self.event, 0)
                self._check(code, "cuStreamWaitEvent")
            # (Result codes are tested inline: this is the per-call path.)
            copying = not (exact and self._bound_to(srcs, dsts))
            if copying:
                if self.bound is not None:
                    self._point(None)
                for (buf, row, rows, pad), (src, lead) in zip(self.ins, srcs, strict=False):
                    code = copy(buf, src, lead * row, stream)
                    if not code and pad and lead < rows:  # the rows past the call
                        code = copy(buf + lead * row, pad + lead * row, (rows - lead) * row,
                                    stream)  # fmt: skip
                    if code:
                        self._check(code, "cuMemcpyDtoDAsync")
            code = drv.graph_launch_raw(self.exec, stream)
            if code:
                self._check(code, "cuGraphLaunch")
            if copying:
                for (buf, row), (dst, lead) in zip(self.outs, dsts, strict=False):
                    code = copy(dst, buf, lead * row, stream)
                    if code:
                        self._check(code, "cuMemcpyDtoDAsync")
            code = drv.record_raw(self.event, stream)
            if code:
                self._check(code, "cuEventRecord")
            self.last_stream = stream

    def _bound_to(self, srcs: list[Rows], dsts: list[Rows]) -> bool:
        """Whether the graph now reads and writes the call's own tensors: bound already,
        or bound here. Not when the nodes could not be mapped, nor for a tensor off
        16-byte alignment (the variants may assume it of the bucket's buffers)."""
        if self.bindings is None:
            return False
        addrs = tuple([a for a, _ in srcs] + [a for a, _ in dsts])
        if self.bound == addrs:
            return True
        if any(a & 15 for a in addrs):
            return False
        self._point(addrs)
        return True

    def _point(self, addrs: tuple[int, ...] | None) -> None:
        """Point the input and output nodes at ``addrs`` (None: the bucket's buffers)."""
        assert self.bindings is not None
        self.bound = (-1,)  # unknown until every node took its new parameters
        drv = self.device.drv
        for b in self.bindings:
            self._check(b.point(drv, self.exec, addrs), "cuGraphExecKernelNodeSetParams")
        self.bound = addrs

    def _check(self, code: int, call: str) -> None:
        if code:
            self.device.drv.check(code, call, f"pipeline {self.name}")

    def close(self) -> None:
        """Free the graph, its event and its buffers (the caller has synchronized)."""
        drv = self.device.drv
        with self.lock:
            drv.graph_exec_destroy(self.exec)
            drv.graph_destroy(self.graph)
            drv.event_destroy(self.event)
            drv.mem_free(self.arena)


def _record(drv: Any, stream: int, calls: list[StepCall]) -> tuple[int, int, list[_Binding] | None]:
    """Capture, instantiate and upload the graph; find the nodes to bind."""
    for launcher, values, _ in calls:  # no allocation may happen while capturing
        launcher.reserve_scratch(values, stream)
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
        bindings = _bindings(drv, graph, calls, stream)
    except BaseException:
        drv.graph_destroy(graph)
        raise
    drv.graph_upload(exec_, stream)
    drv.synchronize(stream)
    return exec_, graph, bindings


def _bindings(drv: Any, graph: int, calls: list[StepCall], stream: int) -> list[_Binding] | None:
    """The nodes of launches that touch inputs or outputs. Capturing one stream's launches
    gives one kernel node per launch (a step with an empty grid launches nothing), listed
    in launch order; unless each node's function and grid say so, or if the driver cannot
    tell, the bucket always copies."""
    launched = [c for c in calls if min(c[0].grid(*c[1])) > 0]
    try:
        nodes = drv.graph_kernel_nodes(graph)
    except CudaError:
        return None
    expected = [(c[0].function, tuple(c[0].grid(*c[1]))) for c in launched]
    if [(func, grid) for _, func, grid in nodes] != expected:
        return None
    return [
        _Binding(node, launcher, values, slots, stream)
        for (node, _, _), (launcher, values, slots) in zip(nodes, launched, strict=True)
        if slots
    ]
