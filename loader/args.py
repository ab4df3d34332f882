"""Turning Python call arguments into launch values, with clear errors instead of crashes.

Pointers come from torch tensors (found by duck typing: the loader never imports torch),
from anything with ``__cuda_array_interface__``, or as raw integer device addresses.
"""

from __future__ import annotations

import ctypes
import math
import operator
import struct
import sys
from collections.abc import Callable
from typing import Any

from .errors import ArgumentError

# torch dtypes by their str(), so that this module needs no torch import.
_TORCH_DTYPES = {
    "torch.float16": "fp16",
    "torch.bfloat16": "bf16",
    "torch.float32": "fp32",
    "torch.float64": "fp64",
    "torch.int8": "i8",
    "torch.int16": "i16",
    "torch.int32": "i32",
    "torch.int64": "i64",
    "torch.uint8": "u8",
    "torch.uint16": "u16",
    "torch.uint32": "u32",
    "torch.uint64": "u64",
    "torch.bool": "i1",
    "torch.float8_e4m3fn": "fp8e4nv",
    "torch.float8_e5m2": "fp8e5",
}
# Our element types by torch's attribute names (torch.bfloat16 is "bfloat16"): how the
# loader allocates a torch tensor of a given element type without importing torch itself.
TORCH_NAMES = {ours: name.removeprefix("torch.") for name, ours in _TORCH_DTYPES.items()}
# Bytes per element of each element type (the pipelines' buffers).
ITEMSIZE = {
    "i1": 1, "i8": 1, "u8": 1, "fp8e4nv": 1, "fp8e5": 1,
    "i16": 2, "u16": 2, "fp16": 2, "bf16": 2,
    "i32": 4, "u32": 4, "fp32": 4,
    "i64": 8, "u64": 8, "fp64": 8,
}  # fmt: skip


# struct formats of the element types a pad value may have (little-endian, as the GPU)
_PACK = {"i8": "b", "u8": "B", "i16": "h", "u16": "H", "i32": "i", "u32": "I", "i64": "q",
         "u64": "Q", "fp16": "e", "fp32": "f", "fp64": "d"}  # fmt: skip


def element_bytes(dtype: str, value: float) -> bytes:
    """One element of ``dtype`` holding ``value``, as the device stores it; ValueError if
    it cannot (an integer type given a fraction or a value out of range, a float type a
    non-finite value, an 8-bit float or a bool type)."""
    if dtype in INT_RANGES:
        lo, hi = INT_RANGES[dtype]
        if value != int(value) or not lo <= int(value) <= hi or dtype == "i1":
            raise ValueError(f"{value!r} is no {dtype} value")
        return struct.pack("<" + _PACK[dtype], int(value))
    if not math.isfinite(value) or (dtype not in _PACK and dtype != "bf16"):
        raise ValueError(f"{value!r} cannot fill {dtype}")
    try:
        if dtype == "bf16":  # fp32's upper half, rounded to nearest even
            bits = struct.unpack("<I", struct.pack("<f", value))[0]
            half = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            if half & 0x7F80 == 0x7F80:  # rounded up to infinity
                raise OverflowError
            return struct.pack("<H", half)
        return struct.pack("<" + _PACK[dtype], value)
    except (OverflowError, struct.error):
        raise ValueError(f"{value!r} is out of {dtype}'s range") from None


def element_type(dtype: Any) -> str | None:
    """Our element type of a torch dtype ("fp16" for torch.float16); None if we have none."""
    return _TORCH_DTYPES.get(str(dtype))


# __cuda_array_interface__ typestrs (numpy's); there is no standard one for bf16.
_TYPESTRS = {
    "f2": "fp16",
    "f4": "fp32",
    "f8": "fp64",
    "i1": "i8",
    "i2": "i16",
    "i4": "i32",
    "i8": "i64",
    "u1": "u8",
    "u2": "u16",
    "u4": "u32",
    "u8": "u64",
    "b1": "i1",
}
_dtype_cache: dict[Any, str | None] = {}

INT_RANGES = {
    "i1": (0, 1),
    "u1": (0, 1),
    "i8": (-(2**7), 2**7 - 1),
    "i16": (-(2**15), 2**15 - 1),
    "i32": (-(2**31), 2**31 - 1),
    "i64": (-(2**63), 2**63 - 1),
    "u8": (0, 2**8 - 1),
    "u16": (0, 2**16 - 1),
    "u32": (0, 2**32 - 1),
    "u64": (0, 2**64 - 1),
}


def pointer(arg: Any, name: str) -> tuple[int, str | None]:
    """(device address, element dtype or None when unknown) for a pointer argument."""
    data_ptr = getattr(arg, "data_ptr", None)
    if data_ptr is not None and hasattr(arg, "dtype"):
        if not getattr(arg, "is_cuda", True):
            raise ArgumentError(
                f"argument {name!r}: tensor is on {arg.device}, not a CUDA device; "
                "move it with .cuda()"
            )
        dt = arg.dtype
        dtype = _dtype_cache.get(dt)
        if dtype is None:
            dtype = _dtype_cache[dt] = _TORCH_DTYPES.get(str(dt))
        addr = data_ptr()
    elif hasattr(arg, "__cuda_array_interface__"):
        cai = arg.__cuda_array_interface__
        addr = cai["data"][0]
        dtype = _TYPESTRS.get(cai.get("typestr", "")[1:])
    elif isinstance(arg, int) and not isinstance(arg, bool):
        addr, dtype = arg, None
    else:
        raise ArgumentError(
            f"argument {name!r}: expected a CUDA tensor, an object with "
            f"__cuda_array_interface__ or an integer device address, got {type(arg).__name__}"
        )
    if not addr:
        if hasattr(arg, "numel") and arg.numel() == 0:
            raise ArgumentError(f"argument {name!r}: empty tensor (null data pointer)")
        raise ArgumentError(f"argument {name!r}: null pointer")
    return addr, dtype


def scalar(arg: Any, type_: str, name: str) -> int | float:
    if type_.startswith("fp") or type_ == "bf16":
        if isinstance(arg, bool) or not isinstance(arg, int | float):
            try:
                value = float(arg)
            except (TypeError, ValueError):
                raise ArgumentError(
                    f"argument {name!r}: expected a number ({type_}), got {type(arg).__name__}"
                ) from None
        else:
            value = float(arg)
        # The value the kernel will see: beyond fp32's range that is inf, which struct
        # (the parameter packer) would refuse to round to.
        return ctypes.c_float(value).value if type_ == "fp32" else value
    try:
        value = operator.index(arg)
    except TypeError:
        raise ArgumentError(
            f"argument {name!r}: expected an integer ({type_}), got {type(arg).__name__}"
        ) from None
    lo, hi = INT_RANGES[type_]
    if not lo <= value <= hi:
        raise ArgumentError(
            f"argument {name!r}: {value} does not fit in {type_}, the type the bundle was "
            f"built for; if calls need it, declare it in the recipe (signature = {{ {name} = "
            f'"i64" }}) and rebuild'
        )
    return value


class CurrentStream:
    """PyTorch's current stream on device ``index`` when torch is in use, else the legacy
    default stream (0).

    ``index`` is the device the bundle launches on, so a call costs one C call and never
    asks torch which device is current: a kernel can only launch on its own device's
    streams anyway.
    """

    def __init__(self, index: int) -> None:
        self._raw: Any = None
        self._index = index

    def __call__(self) -> int:
        if self._raw is None:
            torch = sys.modules.get("torch")
            if torch is None or not torch.cuda.is_initialized():
                return 0
            self._raw = torch._C._cuda_getCurrentRawStream
        handle: int = self._raw(self._index)
        return handle


def stream_handle(stream: Any) -> int:
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    raise ArgumentError(
        f"stream: expected an int handle, a torch.cuda.Stream or an object with "
        f"__cuda_stream__, got {type(stream).__name__}"
    )


def shape_of(obj: Any) -> tuple[int, ...] | None:
    """A tensor's shape (torch's, or ``__cuda_array_interface__``'s), None if it has none."""
    shape = getattr(obj, "shape", None)
    if shape is None:
        cai = getattr(obj, "__cuda_array_interface__", None)
        shape = cai.get("shape") if isinstance(cai, dict) else None
    return None if shape is None else tuple(int(s) for s in shape)


def is_contiguous(obj: Any) -> bool:
    """Whether a tensor is row-major and dense (an array interface without strides is)."""
    method: Callable[[], bool] | None = getattr(obj, "is_contiguous", None)
    if method is not None:
        return bool(method())
    cai = getattr(obj, "__cuda_array_interface__", None)
    return not isinstance(cai, dict) or cai.get("strides") is None
