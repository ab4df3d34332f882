"""Tensor arguments a kernel reads through TMA tensor descriptors.

A kernel written for Hopper takes some tensors as descriptors: its author's host code
builds ``TensorDescriptor(t, t.shape, t.stride(), block_shape)`` with the block shape the
chosen config implies. A bundle's caller passes the tensor itself, and the loader builds
what the chosen variant takes (``DescriptorSpec``):

- lowered to TMA: the 128-byte ``CUtensorMap`` (``cuTensorMapEncodeTiled``, with the
  variant's box, swizzle and element type), then the shape as i32 and the strides as i64,
  exactly the values Triton's own launcher passes;
- otherwise: the base pointer, shape and strides (i64), the padding flag, then the shape
  (i32) and strides (i64) again, as Triton's launcher does for a descriptor it did not lower.

TMA's rules are checked before anything is encoded, with the argument named: a 16-byte
aligned base, a contiguous innermost dimension, other strides of 16-byte multiples.
Encoded maps are cached per launcher by (address, shape, strides), and the slots of all of
a call's descriptors by their values together: a service that calls with the same buffers
pays one dictionary lookup per call.
"""

from __future__ import annotations

import ctypes
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .args import pointer
from .driver import Driver, untyped
from .errors import ArgumentError, CudaError
from .manifest import DescriptorSpec

# What a descriptor argument's value is after conversion: (address, shape, strides), the
# strides in elements, as torch gives them.
Tensor = tuple[int, tuple[int, ...], tuple[int, ...]]

# CU_TENSOR_MAP_L2_PROMOTION_L2_128B: what Triton's launcher asks of every tensor map.
_L2_PROMOTION_128B = 2
_U32, _PTR, _INT = ctypes.c_uint32, ctypes.c_void_p, ctypes.c_int
_ENCODE_ARGTYPES = [_PTR, _INT, _U32, _PTR, _PTR, _PTR, _PTR, _PTR, _INT, _INT, _INT, _INT]
_MAX_CACHED = 256  # encoded maps remembered per launcher (a small LRU would cost more)
_MAX_DIM = 2**32  # TMA: each dimension below 2^32 elements
_MAX_STRIDE = 2**40  # and each stride below 2^40 bytes


def tensor(arg: Any, name: str) -> tuple[Tensor, str | None]:
    """(address, shape, strides) of a tensor passed for a descriptor argument, and its
    element type (None if unknown). A tensor with ``data_ptr``, ``shape`` and ``stride()``
    will do, or a host ``TensorDescriptor`` as its author's code builds one (its tensor,
    shape and strides are read; its block shape is the author's JIT config's, while the
    variant launched has its own). A raw pointer has no shape to describe."""
    if is_host_descriptor(arg):
        if arg.padding != "zero":
            raise ArgumentError(f"argument {name!r}: a TensorDescriptor with padding="
                                f"{arg.padding!r}; aotc's tensor maps pad with zeros")  # fmt: skip
        addr, dtype = pointer(arg.base, name)
        shape = tuple(int(x) for x in arg.shape)
        return (addr, shape, tuple(int(x) for x in arg.strides)), dtype
    stride = getattr(arg, "stride", None)
    if getattr(arg, "shape", None) is None or not callable(stride):
        raise ArgumentError(
            f"argument {name!r}: the kernel reads it through a TMA tensor descriptor; pass "
            f"the tensor itself (shape and strides), not {type(arg).__name__}"
        )
    addr, dtype = pointer(arg, name)
    return (addr, tuple(arg.shape), tuple(stride())), dtype


def is_host_descriptor(arg: Any) -> bool:
    """Whether ``arg`` is a host TensorDescriptor (duck-typed: the loader never imports
    Triton)."""
    return hasattr(arg, "block_shape") and hasattr(arg, "base")


def fast_key(arg: Any) -> tuple[Any, ...]:
    """The fast path's signature of a host TensorDescriptor argument (loader/fastcall.py
    reads a tensor's inline): its tensor's dtype and device, and its padding."""
    return (arg.base.dtype, arg.base.is_cuda, arg.padding)


def fast_value(arg: Any) -> Tensor:
    """What ``tensor`` gives for a TensorDescriptor whose signature the checked path
    accepted."""
    return (arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides))


def slot_types(d: DescriptorSpec) -> tuple[str, ...]:
    """The ABI slots one descriptor argument takes, by manifest type ("tensormap": 128 bytes)."""
    rank = len(d.block)
    if d.tma:
        return ("tensormap",) + ("i32",) * rank + ("i64",) * rank
    return ("*",) + ("i64",) * (2 * rank) + ("i1",) + ("i32",) * rank + ("i64",) * rank


def check(d: DescriptorSpec, value: Tensor, kernel: str) -> None:
    """TMA's rules for the tensor behind descriptor ``d``, or ArgumentError naming it."""
    addr, shape, strides = value
    where = f"{kernel}(): argument {d.param!r}"
    size = d.elem_size or 1
    if len(shape) != len(d.block) or len(strides) != len(shape):
        raise ArgumentError(f"{where}: a tensor of rank {len(shape)}; the kernel reads it "
                            f"as rank {len(d.block)}")  # fmt: skip
    if any(not 0 < s < _MAX_DIM for s in shape):
        raise ArgumentError(f"{where}: shape {list(shape)}: every dimension must be between "
                            f"1 and {_MAX_DIM - 1} for TMA")  # fmt: skip
    if not addr:
        raise ArgumentError(f"{where}: null pointer (an empty tensor?)")
    if strides[-1] != 1:
        raise ArgumentError(f"{where}: its innermost dimension is strided ({strides[-1]}); "
                            "TMA needs it contiguous: pass .contiguous()")  # fmt: skip
    if addr % 16:
        raise ArgumentError(f"{where}: its data starts at {addr:#x}, not 16-byte aligned as "
                            "TMA requires: pass a copy (.clone()) or an aligned view")  # fmt: skip
    bad = [s for s in strides[:-1] if (s * size) % 16 or not 0 < s * size < _MAX_STRIDE]
    if bad:
        raise ArgumentError(f"{where}: stride {bad[0]} ({bad[0] * size} bytes) is not a "
                            "multiple of 16 bytes, as TMA requires: pad the rows (or pass "
                            ".contiguous() of a shape whose rows are)")  # fmt: skip


class TensorMapEncoder:
    """cuTensorMapEncodeTiled for one descriptor of one variant, its argument buffers made
    once: a call fills in the tensor's address, dims and byte strides (innermost first, as
    the driver wants them) and copies out the 128-byte map. Not thread-safe: its launcher
    calls it under its own lock."""

    def __init__(self, drv: Driver, d: DescriptorSpec):
        self._drv = drv
        self._fn: Callable[..., int] | None = None
        rank = self.rank = len(d.block)
        self._size = d.elem_size
        self._elem_type, self._swizzle = d.elem_type, d.swizzle
        self._out = (ctypes.c_uint64 * 16)()
        self._dims = (ctypes.c_uint64 * rank)()
        self._strides = (ctypes.c_uint64 * max(rank - 1, 1))()
        self._box = (ctypes.c_uint32 * rank)(*reversed(d.block))
        self._ones = (ctypes.c_uint32 * rank)(*([1] * rank))

    def __call__(self, addr: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> bytes:
        fn = self._fn or self._resolve()
        rank, size = self.rank, self._size
        for i in range(rank):
            self._dims[i] = shape[rank - 1 - i]
        for i in range(rank - 1):
            self._strides[i] = strides[rank - 2 - i] * size
        code = fn(
            self._out, self._elem_type, rank, ctypes.c_void_p(addr), self._dims, self._strides,
            self._box, self._ones, 0, self._swizzle, _L2_PROMOTION_128B, 0,
        )  # fmt: skip
        if code:
            self._drv.check(code, "cuTensorMapEncodeTiled")
        return bytes(self._out)

    def _resolve(self) -> Callable[..., int]:
        fn = self._drv.optional("cuTensorMapEncodeTiled", _ENCODE_ARGTYPES)
        if fn is None:
            why = "this CUDA driver has no tensor maps (CUDA 12 or newer is needed)"
            raise CudaError(999, "CUDA_ERROR_NOT_SUPPORTED", "cuTensorMapEncodeTiled", why)
        # Called untyped, as cuLaunchKernel is (loader/driver.py): ctypes' conversions of
        # twelve typed arguments would cost more than the rest of a call.
        self._fn = untyped(fn)
        return self._fn


class Expander:
    """A launcher's expansion of its call values into the ABI's extra slots: per descriptor
    argument, its encoded values (cached per tensor).

    ``__call__(values)`` returns ``values`` followed by those; ``starts`` says where each
    descriptor's slots begin in that tuple, and ``size`` how many there are in all.
    """

    def __init__(
        self,
        kernel: str,
        descriptors: Sequence[DescriptorSpec],
        param_index: dict[str, int],
        nvalues: int,
        drv: Driver,
    ):
        self._kernel = kernel
        # Per descriptor: its value's position, its spec, its encoder (None: not TMA), and
        # its cache of encoded slots by (address, shape, strides).
        self._specs = tuple(
            (param_index[d.param], d, TensorMapEncoder(drv, d) if d.tma else None,
             dict[Tensor, tuple[Any, ...]]())
            for d in descriptors
        )  # fmt: skip
        self._lock = threading.Lock()
        # The descriptors' values of a call (one value, or a tuple of them), and the slots
        # of every descriptor by those values together.
        positions = [p for p, *_ in self._specs]
        self._described = operator.itemgetter(*positions) if positions else lambda _: ()
        self._together: dict[Any, tuple[Any, ...]] = {}
        # Where each descriptor's slots start among the expanded values.
        self.starts: dict[str, int] = {}
        at = nvalues
        for d in descriptors:
            self.starts[d.param] = at
            at += len(slot_types(d))
        self.size = at - nvalues

    def __call__(self, values: Sequence[Any]) -> list[Any]:
        # One lookup for all descriptors when the call's tensors were all seen together
        # before (a service calling with the same buffers); else per descriptor.
        key = self._described(values)
        slots = self._together.get(key)
        if slots is None:
            slots = self._expand(values)
            with self._lock:
                if len(self._together) >= _MAX_CACHED:
                    self._together.clear()
                self._together[key] = slots
        return [*values, *slots]

    def _expand(self, values: Sequence[Any]) -> tuple[Any, ...]:
        out: list[Any] = []
        for p, d, encode, cache in self._specs:
            slots = cache.get(values[p])
            if slots is None:
                slots = self._encode(values[p], d, encode, cache)
            out += slots
        return tuple(out)

    def _encode(
        self,
        value: Tensor,
        d: DescriptorSpec,
        encode: TensorMapEncoder | None,
        cache: dict[Tensor, tuple[Any, ...]],
    ) -> tuple[Any, ...]:
        """A descriptor's slots for a tensor the cache has not seen: checked, encoded."""
        addr, shape, strides = value
        if encode is None:  # not lowered to TMA: pointer, shape and strides
            if len(shape) != len(d.block):
                raise ArgumentError(f"{self._kernel}(): argument {d.param!r}: a tensor of rank "
                                    f"{len(shape)}; the kernel reads it as rank "
                                    f"{len(d.block)}")  # fmt: skip
            slots: tuple[Any, ...] = (addr, *shape, *strides, 0, *shape, *strides)
        else:
            check(d, value, self._kernel)
            slots = (encode(addr, shape, strides), *shape, *strides)
        with self._lock:
            if len(cache) >= _MAX_CACHED:
                cache.clear()
            cache[value] = slots
        return slots
