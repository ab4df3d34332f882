"""The manifest's vocabulary: element and scalar types, integer ranges, the base class that
gives every record ``to_json``/``from_json`` through the generic codec, and its error.

loader/manifest.py (kernels, the whole manifest) and the records of the sections a
bundle may lack (manifest_model.py, manifest_pipeline.py, manifest_build.py, op.py) are
built from these; import them from ``loader.manifest``, which re-exports everything here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Annotated, Any, Self

from . import codec
from .codec import Range
from .errors import BundleError

SCALAR_TYPES = frozenset(
    {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32",
     "fp64"}
)  # fmt: skip
INT_TYPES = frozenset({"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"})
# Scalar parameter types a kernel may take (the loader packs these; fp16/bf16 scalars are
# passed as fp32, as the recipe's checker says).
PARAM_SCALAR_TYPES = INT_TYPES | {"fp32", "fp64"}
ELEMENT_TYPES = frozenset(
    {"i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "fp8e4nv", "fp8e5", "fp16",
     "bf16", "fp32", "fp64"}
)  # fmt: skip
# Triton 3.6 appends two pointers to every kernel: global scratch and profile scratch.
TRITON_SCRATCH_ARGS = 2
# Triton's specializations: a pointer/int divisible by 16, or an int equal to 1 (which
# Triton turns into a compile-time constant and drops from the parameter list).
ASSUMPTIONS = (16, 1)
# A kernel's grid may read this besides its integer arguments and meta-parameters.
GRID_BUILTINS = ("NUM_SMS",)

# Integer ranges. Counts and sizes are non-negative and far below what a real bundle holds;
# ``Int`` is any value an i64 argument can take.
Int = Annotated[int, Range(-(2**63), 2**63 - 1)]
Count = Annotated[int, Range(0, 2**31 - 1)]
Small = Annotated[int, Range(0, 2**16)]
Warps = Annotated[int, Range(1, 32)]  # 32 warps = 1024 threads, CUDA's block limit
Scratch = Annotated[int, Range(0, 16)]
Dim = Annotated[int, Range(0, 2**62)]
# A constexpr's value: Triton takes integers, floats, booleans, strings, None, and dtypes
# (written "tl.bfloat16").
Constexpr = Int | float | bool | str | None
# A binding's value for an optional argument (``KernelSpec.optional``): passed, or None.
GIVEN, NONE = "given", "none"


class ManifestError(BundleError):
    pass


class Coded:
    """``to_json``/``from_json`` for every manifest class, through the generic codec."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = codec.encode(self)
        return out

    @classmethod
    def from_json(cls, obj: Any, where: str = "") -> Self:
        try:
            return codec.decode(cls, obj, where)
        except codec.DecodeError as exc:
            raise ManifestError(f"manifest: {exc}") from None


def check_bounds(dims: tuple[str, ...], buckets: tuple[tuple[int, ...], ...]) -> None:
    """One non-empty, strictly ascending list of bucket bounds per dimension."""
    if len(dims) != len(buckets) or len(set(dims)) != len(dims):
        raise ValueError("one list of bucket bounds per dimension")
    for d, b in zip(dims, buckets, strict=True):
        if not b or any(x >= y for x, y in itertools.pairwise(b)):
            raise ValueError(f"the bucket bounds of {d!r} must be a non-empty ascending list")


@dataclass(frozen=True)
class DescriptorSpec(Coded):
    """A tensor argument the kernel reads as a TMA tensor descriptor (``KernelSpec.
    descriptors``), as this variant takes it. ``tma``: lowered to a 128-byte CUtensorMap
    the loader encodes at the call (cuTensorMapEncodeTiled, with this box, swizzle and
    element type), followed by the shape (i32) and strides (i64); otherwise (a target
    without TMA) passed as its base pointer, shape and strides (loader/descriptors.py)."""

    param: str
    block: tuple[Small, ...]  # the box, outermost dimension first
    tma: bool = True
    swizzle: Small = 0  # CUtensorMapSwizzle
    elem_type: Small = 0  # CUtensorMapDataType
    elem_size: Small = 0  # bytes

    def _validate(self) -> None:
        if not 1 <= len(self.block) <= 5 or not all(1 <= b <= 256 for b in self.block):
            raise ValueError(f"descriptor {self.param!r}: a box of 1 to 5 dims of 1 to 256")
