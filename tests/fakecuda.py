"""A stand-in for libcuda, for testing the loader's logic on a machine without a GPU.

It implements the driver calls the loader makes, hands out fake handles, remembers which
modules were loaded and records every launch with its decoded parameters. Device memory
is host memory (so copies really copy), stream capture records launches into graphs, and
a launch runs the Python emulator registered for its kernel's name, if any: enough to
check that a pipeline computes what its steps compute. FakeTensor and FakeArray stand in
for torch tensors and ``__cuda_array_interface__`` objects. The real driver path is
exercised by the GPU tests.
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loader import cubin


def _v(x: Any) -> int:
    """A handle or address, whether passed raw or wrapped in a ctypes object."""
    value = x.value if hasattr(x, "value") else x
    return int(value or 0)


class FakeTensor:
    """Duck-typed like a torch tensor, as far as the loader looks."""

    def __init__(
        self,
        addr: int,
        dtype: str = "torch.float16",
        is_cuda: bool = True,
        shape: tuple[int, ...] = (1,),
        strides: tuple[int, ...] | None = None,
    ):
        self.addr = addr
        self.dtype = dtype
        self.is_cuda = is_cuda
        self.device = "cuda:0" if is_cuda else "cpu"
        self.shape = shape
        # In elements, as torch's: row-major and dense unless given (a view's).
        self.strides = strides or tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))

    def data_ptr(self) -> int:
        return self.addr

    def numel(self) -> int:
        return 1

    def stride(self, dim: int | None = None) -> Any:
        return self.strides if dim is None else self.strides[dim]


class FakeArray:
    def __init__(
        self,
        addr: int,
        typestr: str = "<f2",
        shape: tuple[int, ...] = (1,),
        strides: tuple[int, ...] | None = None,  # in bytes; None: row-major and dense
    ):
        self.__cuda_array_interface__ = {
            "data": (addr, False),
            "typestr": typestr,
            "shape": shape,
            "strides": strides,
            "version": 3,
        }


@dataclass
class Launch:
    function: int
    grid: tuple[int, int, int]
    block: int
    shared: int
    stream: int
    params: list[int]  # each slot read as a 64-bit word (scalars sit in the low bytes)
    replayed: bool = False  # run by cuGraphLaunch rather than directly


@dataclass
class FakeLib:
    name: str = "NVIDIA H200"
    cc: tuple[int, int] = (9, 0)
    sms: int = 132
    max_shared: int = 232448
    modules: list[bytes] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    functions: dict[int, str] = field(default_factory=dict)
    # Each function's parameter offsets, read from its module's cubin as the driver does.
    offsets: dict[int, tuple[int, ...]] = field(default_factory=dict)
    context: int = 0
    devices: int = 1
    context_device: int = 0  # the device of a context made current before the loader's
    fail_launch: int = 0
    # kernel function name -> emulator(params words): runs on launch, on host memory
    emulators: dict[str, Callable[[list[int]], None]] = field(default_factory=dict)
    memory: dict[int, Any] = field(default_factory=dict)  # address -> its host buffer
    ops: list[tuple[Any, ...]] = field(default_factory=list)  # stream-ordered calls, in order
    capturing: dict[int, list[Launch]] = field(default_factory=dict)  # stream -> launches
    graphs: dict[int, list[Launch]] = field(default_factory=dict)
    nodes: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (graph, index)
    execs: dict[int, list[Launch]] = field(default_factory=dict)
    events: set[int] = field(default_factory=set)
    streams: set[int] = field(default_factory=set)
    tensor_maps: list[tuple[Any, ...]] = field(default_factory=list)  # cuTensorMapEncodeTiled calls
    allocations: list[int] = field(default_factory=list)  # cuMemAlloc sizes, in order
    _next: int = 0x9000
    # Model CUDA's per-thread current context: a launch from a thread that never made a
    # context current fails with CUDA_ERROR_INVALID_CONTEXT (201).
    thread_contexts: bool = False
    # Let other threads run inside a launch before the parameters are read, as a driver
    # may: a loader that does not hold its parameter buffer through the call then shows.
    yield_in_launch: bool = False
    _tls: threading.local = field(default_factory=threading.local)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)

    @staticmethod
    def _out(ref: Any, value: Any) -> None:
        ref._obj.value = value

    def cuInit(self, flags: int) -> int:
        return 0

    def cuDriverGetVersion(self, out: Any) -> int:
        self._out(out, 13000)
        return 0

    def cuGetErrorName(self, code: int, out: Any) -> int:
        self._out(
            out,
            {1: b"CUDA_ERROR_INVALID_VALUE", 700: b"CUDA_ERROR_ILLEGAL_ADDRESS"}.get(
                code, b"CUDA_ERROR_UNKNOWN"
            ),
        )
        return 0

    def cuDeviceGetCount(self, out: Any) -> int:
        self._out(out, self.devices)
        return 0

    def cuDeviceGet(self, out: Any, ordinal: int) -> int:
        self._out(out, ordinal)
        return 0

    def cuDeviceGetName(self, buf: Any, size: int, dev: int) -> int:
        buf.value = self.name.encode()
        return 0

    def cuDeviceGetAttribute(self, out: Any, attr: int, dev: int) -> int:
        values = {75: self.cc[0], 76: self.cc[1], 16: self.sms, 97: self.max_shared}
        self._out(out, values[attr])
        return 0

    def cuDevicePrimaryCtxRetain(self, out: Any, dev: int) -> int:
        self._out(out, 0xC0)
        return 0

    def cuCtxGetCurrent(self, out: Any) -> int:
        ctx = getattr(self._tls, "context", 0) if self.thread_contexts else self.context
        self._out(out, ctx or None)
        return 0

    def cuCtxSetCurrent(self, ctx: Any) -> int:
        self.context = self._tls.context = ctx.value if hasattr(ctx, "value") else ctx
        return 0

    def cuCtxGetDevice(self, out: Any) -> int:
        self._out(out, self.context_device)
        return 0

    def cuCtxSynchronize(self) -> int:
        return 0

    def cuModuleLoadData(self, out: Any, image: Any) -> int:
        self.modules.append(bytes(image.raw) if hasattr(image, "raw") else bytes(image))
        self._out(out, 0x1000 + len(self.modules))
        return 0

    def cuModuleUnload(self, mod: Any) -> int:
        return 0

    def cuModuleGetFunction(self, out: Any, mod: Any, name: bytes) -> int:
        handle = 0x2000 + len(self.functions) + 1
        self.functions[handle] = name.decode()
        try:
            image = self.modules[_v(mod) - 0x1001]
            layout = cubin.param_layout(image, name.decode())
            self.offsets[handle] = tuple(offset for offset, _ in layout)
        except (IndexError, cubin.CubinError):
            pass  # no cubin (a test's stand-in module): its launches read kernelParams
        self._out(out, handle)
        return 0

    def cuFuncSetAttribute(self, fn: Any, attr: int, value: int) -> int:
        return 0

    def cuFuncSetCacheConfig(self, fn: Any, config: int) -> int:
        return 0

    def cuLaunchKernel(
        self,
        fn: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        shared: int,
        stream: Any,
        params: Any,
        extra: Any,
    ) -> int:
        if self.fail_launch:
            return self.fail_launch
        if self.thread_contexts and not getattr(self._tls, "context", 0):
            return 201
        if self.yield_in_launch:
            time.sleep(0)
        # The loader passes handles as c_void_p (it calls cuLaunchKernel untyped, see
        # loader/driver.py) and ints for the rest, as a C function would receive them.
        for value in (gx, gy, gz, bx, by, bz, shared):
            assert type(value) is int and 0 <= value < 2**31, value
        assert isinstance(fn, ctypes.c_void_p) and (
            stream is None or isinstance(stream, ctypes.c_void_p)
        )
        # Each parameter's first 8 bytes, from a pointer per parameter (kernelParams) or,
        # as the driver copies a buffer passed whole (extra), from the cubin's offsets in it.
        if extra is None:
            assert isinstance(params, ctypes.Array)
            addresses = [params[i] for i in range(len(params))]
        else:
            assert params is None and isinstance(extra, ctypes.Array) and len(extra) == 5
            assert (extra[0], extra[2], extra[4]) == (1, 2, None)
            size = ctypes.c_size_t.from_address(extra[3]).value
            offsets = self.offsets[_v(fn)]
            assert offsets and offsets[-1] < size
            addresses = [extra[1] + offset for offset in offsets]
        words = [ctypes.c_uint64.from_address(a).value for a in addresses]
        launch = Launch(_v(fn), (gx, gy, gz), bx, shared, _v(stream), words)
        if launch.stream in self.capturing:
            self.capturing[launch.stream].append(launch)
        else:
            self._run(launch)
        return 0

    def _run(self, launch: Launch) -> None:
        self.launches.append(launch)
        self.ops.append(("launch", self.functions.get(launch.function), launch.stream))
        emulate = self.emulators.get(self.functions.get(launch.function, ""))
        if emulate is not None:
            emulate(launch.params)

    def _handle(self) -> int:
        self._next += 0x10
        return self._next

    def cuStreamSynchronize(self, stream: Any) -> int:
        return 0

    def cuTensorMapEncodeTiled(
        self, out: Any, elem_type: int, rank: int, address: Any, dims: Any, strides: Any,
        box: Any, elem_strides: Any, interleave: int, swizzle: int, l2: int, fill: int,
    ) -> int:  # fmt: skip
        """Records the call and writes its arguments into the 128-byte map, so a test can
        read back from a launch's parameters which tensor a map describes."""
        call = (
            elem_type, rank, _v(address), tuple(dims[:rank]), tuple(strides[: rank - 1]),
            tuple(box[:rank]), tuple(elem_strides[:rank]), interleave, swizzle, l2, fill,
        )  # fmt: skip
        self.tensor_maps.append(call)
        words = [_v(address), elem_type, swizzle, *call[3], *call[4], *call[5]]
        for i, w in enumerate(words[:16]):
            out[i] = w
        return 0

    def cuMemAlloc_v2(self, out: Any, size: int) -> int:
        buf = ctypes.create_string_buffer(_v(size))
        self.allocations.append(_v(size))
        self.memory[ctypes.addressof(buf)] = buf
        self._out(out, ctypes.addressof(buf))
        return 0

    def cuMemFree_v2(self, ptr: Any) -> int:
        return 0 if self.memory.pop(_v(ptr), None) is not None else 1

    def cuMemsetD8_v2(self, dst: Any, value: int, n: int) -> int:
        ctypes.memset(_v(dst), _v(value), _v(n))
        return 0

    def cuMemcpyDtoDAsync_v2(self, dst: Any, src: Any, n: Any, stream: Any) -> int:
        ctypes.memmove(_v(dst), _v(src), _v(n))
        self.ops.append(("copy", _v(dst), _v(src), _v(n), _v(stream)))
        return 0

    def cuStreamCreate(self, out: Any, flags: int) -> int:
        h = self._handle()
        self.streams.add(h)
        self._out(out, h)
        return 0

    def cuStreamDestroy_v2(self, stream: Any) -> int:
        self.streams.discard(_v(stream))
        return 0

    def cuStreamBeginCapture_v2(self, stream: Any, mode: int) -> int:
        self.capturing[_v(stream)] = []
        return 0

    def cuStreamEndCapture(self, stream: Any, out: Any) -> int:
        h = self._handle()
        self.graphs[h] = self.capturing.pop(_v(stream))
        # One node per captured launch, each depending on the one before.
        for i in range(len(self.graphs[h])):
            self.nodes[h * 1000 + i] = (h, i)
        self._out(out, h)
        return 0

    def _listing(self, handles: list[int], out: Any, count: Any) -> int:
        if out is not None:
            for i, node in enumerate(handles):
                out[i] = node
        count._obj.value = len(handles)
        return 0

    def cuGraphGetNodes(self, graph: Any, out: Any, count: Any) -> int:
        g = _v(graph)
        return self._listing([g * 1000 + i for i in range(len(self.graphs[g]))], out, count)

    def cuGraphKernelNodeGetParams_v2(self, node: Any, ref: Any) -> int:
        g, i = self.nodes[_v(node)]
        launch = self.graphs[g][i]
        p = ref._obj
        p.func = launch.function
        p.gridDimX, p.gridDimY, p.gridDimZ = launch.grid
        return 0

    def cuGraphExecKernelNodeSetParams_v2(self, exec_: Any, node: Any, ref: Any) -> int:
        p = ref._obj
        _, i = self.nodes[_v(node)]
        old = self.execs[_v(exec_)][i]
        array = (ctypes.c_void_p * len(old.params)).from_address(p.kernelParams)
        words = [ctypes.c_uint64.from_address(array[k]).value for k in range(len(old.params))]
        grid = (p.gridDimX, p.gridDimY, p.gridDimZ)
        self.execs[_v(exec_)][i] = Launch(p.func, grid, p.blockDimX, p.sharedMemBytes, 0, words)
        self.ops.append(("set_params", _v(exec_), i))
        return 0

    def cuGraphInstantiateWithFlags(self, out: Any, graph: Any, flags: int) -> int:
        h = self._handle()
        self.execs[h] = list(self.graphs[_v(graph)])
        self._out(out, h)
        return 0

    def cuGraphDestroy(self, graph: Any) -> int:
        del self.graphs[_v(graph)]
        return 0

    def cuGraphExecDestroy(self, exec_: Any) -> int:
        del self.execs[_v(exec_)]
        return 0

    def cuGraphUpload(self, exec_: Any, stream: Any) -> int:
        return 0

    def cuGraphLaunch(self, exec_: Any, stream: Any) -> int:
        self.ops.append(("graph", _v(exec_), _v(stream)))
        for launch in self.execs[_v(exec_)]:
            self._run(Launch(**{**launch.__dict__, "stream": _v(stream), "replayed": True}))
        return 0

    def cuEventCreate(self, out: Any, flags: int) -> int:
        h = self._handle()
        self.events.add(h)
        self._out(out, h)
        return 0

    def cuEventDestroy_v2(self, event: Any) -> int:
        self.events.discard(_v(event))
        return 0

    def cuEventRecord(self, event: Any, stream: Any) -> int:
        self.ops.append(("record", _v(event), _v(stream)))
        return 0

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> int:
        self.ops.append(("wait", _v(stream), _v(event)))
        return 0

    def cuMemcpyHtoD_v2(self, dst: Any, src: bytes, n: Any) -> int:
        ctypes.memmove(_v(dst), src, _v(n))
        return 0

    def cuMemcpyDtoH_v2(self, dst: Any, src: Any, n: Any) -> int:
        ctypes.memmove(dst, _v(src), _v(n))
        return 0
