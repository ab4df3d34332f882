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
Encoded maps are cached per launcher by (address, shape, strides): a service that calls
with the same buffers pays one dictionary lookup per descriptor.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .driver import Driver
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
    element type (None if unknown). Only a tensor with ``data_ptr``, ``shape`` and
    ``stride()`` will do: a raw pointer has no shape to describe."""
    from .args import pointer

    stride = getattr(arg, "stride", None)
    if getattr(arg, "shape", None) is None or not callable(stride):
        raise ArgumentError(
            f"argument {name!r}: the kernel reads it through a TMA tensor descriptor; pass "
            f"the tensor itself (shape and strides), not {type(arg).__name__}"
        )
    addr, dtype = pointer(arg, name)
    return (addr, tuple(arg.shape), tuple(stride())), dtype


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


Encode = Callable[[int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...], int], bytes]


class Expander:
    """A launcher's expansion of its call values into the ABI's extra slots: per descriptor
    argument, its encoded values (cached), then the global scratch pointer if it takes one.

    ``__call__(values, scratch)`` returns ``values`` followed by those; ``positions`` maps
    each expanded slot to its index in that tuple, in ABI order.
    """

    def __init__(
        self,
        kernel: str,
        descriptors: Sequence[DescriptorSpec],
        param_index: dict[str, int],
        nvalues: int,
        encode: Encode,
    ):
        self._kernel = kernel
        self._encode = encode
        self._specs = tuple((param_index[d.param], d) for d in descriptors)
        self._cache: list[dict[Tensor, tuple[Any, ...]]] = [{} for _ in descriptors]
        self._lock = threading.Lock()
        # Where each descriptor's slots start among the expanded values.
        self.starts: dict[str, int] = {}
        at = nvalues
        for d in descriptors:
            self.starts[d.param] = at
            at += len(slot_types(d))
        self.size = at - nvalues

    def __call__(self, values: Sequence[Any]) -> tuple[Any, ...]:
        out: list[Any] = list(values)
        for (p, d), cache in zip(self._specs, self._cache, strict=True):
            value = values[p]
            slots = cache.get(value)
            if slots is None:
                slots = self._slots(d, value)
                with self._lock:
                    if len(cache) >= _MAX_CACHED:
                        cache.clear()
                    cache[value] = slots
            out.extend(slots)
        return tuple(out)

    def _slots(self, d: DescriptorSpec, value: Tensor) -> tuple[Any, ...]:
        check(d, value, self._kernel)
        addr, shape, strides = value
        if not d.tma:
            return (addr, *shape, *strides, 0, *shape, *strides)
        size = d.elem_size
        # cuTensorMapEncodeTiled wants the innermost dimension first, strides in bytes.
        dims = tuple(reversed(shape))
        byte_strides = tuple(s * size for s in reversed(strides[:-1]))
        box = tuple(reversed(d.block))
        tmap = self._encode(d.elem_type, addr, dims, byte_strides, box, d.swizzle)
        return (tmap, *shape, *strides)


def encode_tensor_map(
    drv: Driver,
    elem_type: int,
    address: int,
    dims: tuple[int, ...],
    strides: tuple[int, ...],
    box: tuple[int, ...],
    swizzle: int,
) -> bytes:
    """A 128-byte CUtensorMap for a tiled TMA copy (cuTensorMapEncodeTiled), as Triton's
    launcher encodes it: ``dims`` and ``box`` innermost first, ``strides`` in bytes, of
    every dimension but the innermost. A host-only call: it touches no GPU state."""
    fn = drv.optional("cuTensorMapEncodeTiled", _ENCODE_ARGTYPES)
    if fn is None:
        why = "this CUDA driver has no tensor maps (CUDA 12 or newer is needed)"
        raise CudaError(999, "CUDA_ERROR_NOT_SUPPORTED", "cuTensorMapEncodeTiled", why)
    rank = len(dims)
    out = (ctypes.c_uint64 * 16)()
    code = fn(
        out, elem_type, rank, ctypes.c_void_p(address), (ctypes.c_uint64 * rank)(*dims),
        (ctypes.c_uint64 * max(rank - 1, 1))(*strides), (ctypes.c_uint32 * rank)(*box),
        (ctypes.c_uint32 * rank)(*([1] * rank)), 0, swizzle, _L2_PROMOTION_128B, 0,
    )  # fmt: skip
    drv.check(code, "cuTensorMapEncodeTiled")
    return bytes(out)
