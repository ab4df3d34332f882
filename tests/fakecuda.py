"""A stand-in for libcuda, for testing the loader's logic on a machine without a GPU.

It implements the driver calls the loader makes, hands out fake handles, remembers which
modules were loaded and records every launch with its decoded parameters. FakeTensor and
FakeArray stand in for torch tensors and ``__cuda_array_interface__`` objects. The real
driver path is exercised by the GPU tests.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from typing import Any


class FakeTensor:
    """Duck-typed like a torch tensor, as far as the loader looks."""

    def __init__(self, addr: int, dtype: str = "torch.float16", is_cuda: bool = True):
        self.addr = addr
        self.dtype = dtype
        self.is_cuda = is_cuda
        self.device = "cuda:0" if is_cuda else "cpu"

    def data_ptr(self) -> int:
        return self.addr

    def numel(self) -> int:
        return 1


class FakeArray:
    def __init__(self, addr: int, typestr: str = "<f2"):
        self.__cuda_array_interface__ = {
            "data": (addr, False),
            "typestr": typestr,
            "shape": (1,),
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


@dataclass
class FakeLib:
    name: str = "NVIDIA H200"
    cc: tuple[int, int] = (9, 0)
    sms: int = 132
    max_shared: int = 232448
    modules: list[bytes] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    functions: dict[int, str] = field(default_factory=dict)
    context: int = 0
    devices: int = 1
    context_device: int = 0  # the device of a context made current before the loader's
    fail_launch: int = 0
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
        assert isinstance(params, ctypes.Array) and extra is None
        words = [ctypes.c_uint64.from_address(params[i]).value for i in range(len(params))]
        self.launches.append(Launch(_handle(fn), (gx, gy, gz), bx, shared, _handle(stream), words))
        return 0

    def cuStreamSynchronize(self, stream: Any) -> int:
        return 0

    # The remaining calls exist so that Driver() can bind them; the loader does not use them.
    def cuMemAlloc_v2(self, *a: Any) -> int:
        return 1

    cuMemFree_v2 = cuMemcpyHtoD_v2 = cuMemcpyDtoH_v2 = cuMemsetD8_v2 = cuMemAlloc_v2


def _handle(h: Any) -> int:
    return (h.value or 0) if isinstance(h, ctypes.c_void_p) else (h or 0)
