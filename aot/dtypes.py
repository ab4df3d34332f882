"""Element types as the builder needs them, in one place: how close a result must be to
its float64 reference, and what each type is called in Triton's language.

The loader holds its own tables (loader/manifest.py ``ELEMENT_TYPES``, loader/args.py for
torch's dtypes), since it imports nothing of aot; the builder uses those where it needs
the same thing, and adds here only what the loader has no use for.
"""

from __future__ import annotations

# The relative error a kernel's output may have against the float64 reference, by the
# element types it touches (the loosest of them wins). A whole model is compared after many
# operations, so its bf16 bound is twice a kernel's.
KERNEL_TOLERANCE = {"fp8e4nv": 5e-2, "fp8e5": 5e-2, "fp16": 1e-2, "bf16": 1e-2, "fp32": 1e-3,
                    "fp64": 1e-9}  # fmt: skip
MODEL_TOLERANCE = {"fp16": 1e-2, "bf16": 2e-2, "fp32": 1e-3, "fp64": 1e-9}

# Element types by the names of Triton's ``tl`` dtypes (a constexpr "T" becomes
# "tl.bfloat16" under a binding of T to bf16).
TL_NAMES = {
    "fp16": "float16", "bf16": "bfloat16", "fp32": "float32", "fp64": "float64",
    "fp8e4nv": "float8e4nv", "fp8e5": "float8e5", "i1": "int1", "i8": "int8", "i16": "int16",
    "i32": "int32", "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
    "u64": "uint64",
}  # fmt: skip
