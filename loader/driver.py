"""Typed ctypes bindings to the few CUDA driver functions the loader needs.

Every call goes through ``check()``, which turns a non-zero CUresult into
``CudaError(code, name)``. The library is opened lazily, so importing the loader on a
machine without a GPU (CI, the builder) costs nothing and fails nothing. The one exception
to "typed" is ``Driver.launch_untyped``, the per-call launch entry (see its comment).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

from .errors import CudaError

CUresult = ctypes.c_int
CUdevice = ctypes.c_int
CUcontext = ctypes.c_void_p
CUmodule = ctypes.c_void_p
CUfunction = ctypes.c_void_p
CUstream = ctypes.c_void_p
CUdeviceptr = ctypes.c_uint64
CUgraph = ctypes.c_void_p
CUgraphExec = ctypes.c_void_p
CUevent = ctypes.c_void_p
CUgraphNode = ctypes.c_void_p


class KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2: what cuGraphExecKernelNodeSetParams gives a kernel node."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),  # unused: func is set
        ("ctx", ctypes.c_void_p),  # NULL: the current context
    ]


CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_CACHE_PREFER_SHARED = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_INVALID_CONTEXT = 201
CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2
# Thread-local capture: other threads' CUDA calls (a torch allocation, say) may go on
# while this thread captures, and do not invalidate the capture.
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

# name -> (symbol, or symbols to try in order; argtypes). All return CUresult. The _v2
# names are the ABI the headers map to.
_SIGNATURES: dict[str, tuple[str | tuple[str, ...], list[Any]]] = {
    "cuInit": ("cuInit", [ctypes.c_uint]),
    "cuDriverGetVersion": ("cuDriverGetVersion", [ctypes.POINTER(ctypes.c_int)]),
    "cuDeviceGet": ("cuDeviceGet", [ctypes.POINTER(CUdevice), ctypes.c_int]),
    "cuDeviceGetCount": ("cuDeviceGetCount", [ctypes.POINTER(ctypes.c_int)]),
    "cuDeviceGetName": ("cuDeviceGetName", [ctypes.c_char_p, ctypes.c_int, CUdevice]),
    "cuDeviceGetAttribute": (
        "cuDeviceGetAttribute",
        [ctypes.POINTER(ctypes.c_int), ctypes.c_int, CUdevice],
    ),
    "cuDevicePrimaryCtxRetain": (
        "cuDevicePrimaryCtxRetain",
        [ctypes.POINTER(CUcontext), CUdevice],
    ),
    "cuCtxGetCurrent": ("cuCtxGetCurrent", [ctypes.POINTER(CUcontext)]),
    "cuCtxSetCurrent": ("cuCtxSetCurrent", [CUcontext]),
    "cuCtxGetDevice": ("cuCtxGetDevice", [ctypes.POINTER(CUdevice)]),
    "cuCtxSynchronize": ("cuCtxSynchronize", []),
    "cuModuleLoadData": ("cuModuleLoadData", [ctypes.POINTER(CUmodule), ctypes.c_void_p]),
    "cuModuleUnload": ("cuModuleUnload", [CUmodule]),
    "cuModuleGetFunction": (
        "cuModuleGetFunction",
        [ctypes.POINTER(CUfunction), CUmodule, ctypes.c_char_p],
    ),
    "cuFuncSetAttribute": ("cuFuncSetAttribute", [CUfunction, ctypes.c_int, ctypes.c_int]),
    "cuFuncSetCacheConfig": ("cuFuncSetCacheConfig", [CUfunction, ctypes.c_int]),
    "cuLaunchKernel": (
        "cuLaunchKernel",
        [
            CUfunction,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_uint,
            CUstream,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ],
    ),
    "cuStreamSynchronize": ("cuStreamSynchronize", [CUstream]),
    "cuMemAlloc": ("cuMemAlloc_v2", [ctypes.POINTER(CUdeviceptr), ctypes.c_size_t]),
    "cuMemFree": ("cuMemFree_v2", [CUdeviceptr]),
    "cuMemcpyHtoD": ("cuMemcpyHtoD_v2", [CUdeviceptr, ctypes.c_void_p, ctypes.c_size_t]),
    "cuMemcpyDtoH": ("cuMemcpyDtoH_v2", [ctypes.c_void_p, CUdeviceptr, ctypes.c_size_t]),
    "cuMemsetD8": ("cuMemsetD8_v2", [CUdeviceptr, ctypes.c_ubyte, ctypes.c_size_t]),
    # Streams, events and graphs: what pipelines capture and replay.
    "cuStreamCreate": ("cuStreamCreate", [ctypes.POINTER(CUstream), ctypes.c_uint]),
    "cuStreamDestroy": ("cuStreamDestroy_v2", [CUstream]),
    "cuStreamBeginCapture": ("cuStreamBeginCapture_v2", [CUstream, ctypes.c_int]),
    "cuStreamEndCapture": ("cuStreamEndCapture", [CUstream, ctypes.POINTER(CUgraph)]),
    "cuStreamWaitEvent": ("cuStreamWaitEvent", [CUstream, CUevent, ctypes.c_uint]),
    "cuEventCreate": ("cuEventCreate", [ctypes.POINTER(CUevent), ctypes.c_uint]),
    "cuEventDestroy": ("cuEventDestroy_v2", [CUevent]),
    "cuEventRecord": ("cuEventRecord", [CUevent, CUstream]),
    "cuGraphInstantiateWithFlags": (
        "cuGraphInstantiateWithFlags",
        [ctypes.POINTER(CUgraphExec), CUgraph, ctypes.c_ulonglong],
    ),
    "cuGraphUpload": ("cuGraphUpload", [CUgraphExec, CUstream]),
    "cuGraphLaunch": ("cuGraphLaunch", [CUgraphExec, CUstream]),
    "cuGraphDestroy": ("cuGraphDestroy", [CUgraph]),
    "cuGraphExecDestroy": ("cuGraphExecDestroy", [CUgraphExec]),
    "cuMemcpyDtoDAsync": (
        "cuMemcpyDtoDAsync_v2",
        [CUdeviceptr, CUdeviceptr, ctypes.c_size_t, CUstream],
    ),
    "cuGraphGetNodes": (
        "cuGraphGetNodes",
        [CUgraph, ctypes.POINTER(CUgraphNode), ctypes.POINTER(ctypes.c_size_t)],
    ),
    # CUDA 12 names these _v2 (the unversioned ones take the shorter v1 struct); CUDA 13
    # drops the suffix. KernelNodeParams is the v2 struct, which only adds fields at the
    # end, so either symbol reads or fills what it knows of it.
    "cuGraphKernelNodeGetParams": (
        ("cuGraphKernelNodeGetParams_v2", "cuGraphKernelNodeGetParams"),
        [CUgraphNode, ctypes.POINTER(KernelNodeParams)],
    ),
    "cuGraphExecKernelNodeSetParams": (
        ("cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams"),
        [CUgraphExec, CUgraphNode, ctypes.POINTER(KernelNodeParams)],
    ),
}


# cuLaunchKernel with no argument types, for the per-call path. With argtypes set, ctypes
# calls from_param() once per argument, which costs more than a microsecond per launch;
# without, it converts Python ints in C, as C ints. That matches cuLaunchKernel's unsigned
# int parameters for every value a launch allows (grid <= 2**31 - 1, block, shared memory),
# so callers must pass exactly: c_void_p (or None) for the function, stream, kernelParams
# and extra pointers, and ints below 2**31 for the other seven.
_UNTYPED_LAUNCH = ctypes.CFUNCTYPE(CUresult)


def untyped(fn: Any) -> Callable[..., int]:
    if not hasattr(fn, "argtypes"):  # a Python stand-in (tests): call it as it is
        return fn  # type: ignore[no-any-return]
    address = ctypes.cast(fn, ctypes.c_void_p).value or 0
    # A cdecl prototype with no argtypes accepts any number of arguments, converted untyped.
    launch: Callable[..., int] = _UNTYPED_LAUNCH(address)
    return launch


def _resolve(lib: Any, symbols: tuple[str, ...]) -> Any:
    for symbol in symbols[:-1]:
        try:
            return getattr(lib, symbol)
        except AttributeError:
            continue
    return getattr(lib, symbols[-1])


class Driver:
    """The CUDA driver API, loaded from ``libcuda.so.1`` (or a stand-in, for tests)."""

    def __init__(self, lib: Any):
        self._lib = lib
        self._get_error_name = getattr(lib, "cuGetErrorName", None)
        if self._get_error_name is not None and hasattr(self._get_error_name, "argtypes"):
            self._get_error_name.argtypes = [CUresult, ctypes.POINTER(ctypes.c_char_p)]
            self._get_error_name.restype = CUresult
        self._fn: dict[str, Callable[..., int]] = {}
        self._optional: dict[str, Callable[..., int] | None] = {}
        for name, (symbols, argtypes) in _SIGNATURES.items():
            fn = _resolve(lib, (symbols,) if isinstance(symbols, str) else symbols)
            if hasattr(fn, "argtypes"):
                fn.argtypes = argtypes
                fn.restype = CUresult
            self._fn[name] = fn
        # Raw entries, used on hot paths without the check() wrapper's overhead.
        self.launch_raw = self._fn["cuLaunchKernel"]
        self.graph_launch_raw = self._fn["cuGraphLaunch"]
        self.copy_raw = self._fn["cuMemcpyDtoDAsync"]
        self.record_raw = self._fn["cuEventRecord"]
        self.wait_raw = self._fn["cuStreamWaitEvent"]
        self.node_params_raw = self._fn["cuGraphExecKernelNodeSetParams"]
        self.launch_untyped = untyped(self.launch_raw)

    def error_name(self, code: int) -> str:
        if self._get_error_name is None:
            return f"CUDA_ERROR_{code}"
        out = ctypes.c_char_p()
        if self._get_error_name(code, ctypes.byref(out)) != 0 or not out.value:
            return f"CUDA_ERROR_{code}"
        return out.value.decode()

    def check(self, code: int, call: str, detail: str = "") -> None:
        if code != 0:
            raise CudaError(code, self.error_name(code), call, detail)

    def call(self, name: str, *args: Any) -> None:
        self.check(self._fn[name](*args), name)

    # Typed helpers for the calls whose results the loader reads.
    def init(self) -> None:
        self.call("cuInit", 0)

    def device_count(self) -> int:
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def device(self, ordinal: int) -> int:
        dev = CUdevice()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def device_name(self, dev: int) -> str:
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, dev)
        return buf.value.decode(errors="replace")

    def attribute(self, attr: int, dev: int) -> int:
        out = ctypes.c_int()
        self.call("cuDeviceGetAttribute", ctypes.byref(out), attr, dev)
        return out.value

    def current_context(self) -> int | None:
        ctx = CUcontext()
        self.call("cuCtxGetCurrent", ctypes.byref(ctx))
        return ctx.value or None

    def context_device(self) -> int:
        dev = CUdevice()
        self.call("cuCtxGetDevice", ctypes.byref(dev))
        return dev.value

    def retain_primary_context(self, dev: int) -> int:
        ctx = CUcontext()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        return ctx.value or 0

    def set_current(self, ctx: int) -> None:
        self.call("cuCtxSetCurrent", ctypes.c_void_p(ctx))

    def load_module(self, image: bytes) -> int:
        mod = CUmodule()
        buf = ctypes.create_string_buffer(image, len(image))
        self.call("cuModuleLoadData", ctypes.byref(mod), buf)
        return mod.value or 0

    def get_function(self, module: int, name: str) -> int:
        fn = CUfunction()
        self.check(
            self._fn["cuModuleGetFunction"](
                ctypes.byref(fn), ctypes.c_void_p(module), name.encode()
            ),
            "cuModuleGetFunction",
            f"kernel {name!r}",
        )
        return fn.value or 0

    def set_max_dynamic_shared(self, fn: int, nbytes: int) -> None:
        f = ctypes.c_void_p(fn)
        self.call("cuFuncSetCacheConfig", f, CU_FUNC_CACHE_PREFER_SHARED)
        self.call("cuFuncSetAttribute", f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)

    def synchronize(self, stream: int | None = None) -> None:
        if stream is None:
            self.call("cuCtxSynchronize")
        else:
            self.call("cuStreamSynchronize", ctypes.c_void_p(stream))

    def mem_alloc(self, nbytes: int) -> int:
        ptr = CUdeviceptr()
        self.call("cuMemAlloc", ctypes.byref(ptr), nbytes)
        return ptr.value

    def optional(self, symbol: str, argtypes: list[Any]) -> Callable[..., int] | None:
        """A function newer drivers have (None where this one lacks), typed, cached."""
        if symbol not in self._optional:
            fn = self._optional[symbol] = getattr(self._lib, symbol, None)
            if fn is not None and hasattr(fn, "argtypes"):
                fn.argtypes, fn.restype = argtypes, CUresult
        return self._optional[symbol]

    def mem_free(self, ptr: int) -> None:
        self.call("cuMemFree", CUdeviceptr(ptr))

    def memcpy_htod(self, dst: int, src: bytes) -> None:
        self.call("cuMemcpyHtoD", CUdeviceptr(dst), src, len(src))

    def memcpy_dtoh(self, src: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(nbytes)
        self.call("cuMemcpyDtoH", buf, CUdeviceptr(src), nbytes)
        return buf.raw

    def memset_d8(self, dst: int, value: int, nbytes: int) -> None:
        self.call("cuMemsetD8", CUdeviceptr(dst), value, nbytes)

    def stream_create(self) -> int:
        out = CUstream()
        self.call("cuStreamCreate", ctypes.byref(out), CU_STREAM_NON_BLOCKING)
        return out.value or 0

    def stream_destroy(self, stream: int) -> None:
        self.call("cuStreamDestroy", ctypes.c_void_p(stream))

    def event_create(self) -> int:
        out = CUevent()
        self.call("cuEventCreate", ctypes.byref(out), CU_EVENT_DISABLE_TIMING)
        return out.value or 0

    def event_destroy(self, event: int) -> None:
        self.call("cuEventDestroy", ctypes.c_void_p(event))

    def begin_capture(self, stream: int) -> None:
        self.call("cuStreamBeginCapture", ctypes.c_void_p(stream),
                  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)  # fmt: skip

    def end_capture(self, stream: int) -> int:
        """The captured graph; the stream is back to normal even when this raises."""
        graph = CUgraph()
        self.call("cuStreamEndCapture", ctypes.c_void_p(stream), ctypes.byref(graph))
        return graph.value or 0

    def instantiate(self, graph: int) -> int:
        out = CUgraphExec()
        self.call("cuGraphInstantiateWithFlags", ctypes.byref(out), ctypes.c_void_p(graph), 0)
        return out.value or 0

    def graph_upload(self, exec_: int, stream: int) -> None:
        self.call("cuGraphUpload", ctypes.c_void_p(exec_), ctypes.c_void_p(stream))

    def graph_destroy(self, graph: int) -> None:
        self.call("cuGraphDestroy", ctypes.c_void_p(graph))

    def graph_exec_destroy(self, exec_: int) -> None:
        self.call("cuGraphExecDestroy", ctypes.c_void_p(exec_))

    def graph_kernel_nodes(self, graph: int) -> list[tuple[int, int, tuple[int, int, int]]]:
        """(node, function, grid) of each of the graph's nodes, in the driver's order."""
        n = ctypes.c_size_t(0)
        self.call("cuGraphGetNodes", ctypes.c_void_p(graph), None, ctypes.byref(n))
        nodes = (CUgraphNode * n.value)()
        self.call("cuGraphGetNodes", ctypes.c_void_p(graph), nodes, ctypes.byref(n))
        out = []
        for node in nodes[: n.value]:
            p = KernelNodeParams()
            self.call("cuGraphKernelNodeGetParams", ctypes.c_void_p(node), ctypes.byref(p))
            out.append((node or 0, p.func or 0, (p.gridDimX, p.gridDimY, p.gridDimZ)))
        return out


_driver: Driver | None = None
_lock = threading.Lock()


def get() -> Driver:
    """The process's driver, opened and initialized on first use."""
    global _driver
    if _driver is None:
        with _lock:
            if _driver is None:
                try:
                    lib = ctypes.CDLL("libcuda.so.1")
                except OSError as exc:
                    raise CudaError(
                        100,
                        "CUDA_ERROR_NO_DEVICE",
                        "dlopen(libcuda.so.1)",
                        f"{exc}; no NVIDIA driver",
                    ) from None
                drv = Driver(lib)
                drv.init()
                _driver = drv
    return _driver


def install(drv: Driver | None) -> None:
    """Replace the process's driver (tests use this to run the loader against a mock)."""
    global _driver
    _driver = drv
