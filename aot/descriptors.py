"""What Triton compiled for a kernel's TMA descriptor arguments and global scratch.

A descriptor argument is compiled as Triton's ``tensordesc<T[block]>`` (aot/compile.py
``job_for``). Triton then says, in the compiled kernel's metadata, whether it lowered each
to a TMA tensor map and with which box, swizzle and element type, and how much global
scratch memory each program needs. ``descriptor_record`` keeps that in the compile cache's
record; ``descriptor_specs`` turns the record into the manifest's ``DescriptorSpec``s,
which the loader encodes from at every call (loader/descriptors.py).

A Gluon kernel's descriptor type also names the shared-memory layout its blocks land in
(``tensordesc<T[block],NVMMASharedLayout(...)>``): ``gluon_signature`` gives each the
default NVMMA layout of its block, the one ``NVMMASharedLayout.get_default_for`` gives the
kernel's author on the host. Its swizzle reaches the metadata like any other.
"""

from __future__ import annotations

from typing import Any

from loader.manifest import DescriptorSpec

Signature = tuple[tuple[str, str], ...]  # (parameter, Triton type), as a compile job has it

# Triton's device-side TMA element types differ from the driver's CUtensorMapDataType in
# three places (triton/backends/nvidia/driver.py, TMA_DTYPE_DEVICE_TO_HOST).
_TMA_HOST_TYPE = {8: 10, 9: 8, 10: 9}


def _described(ty: str) -> tuple[str, tuple[int, ...]]:
    """``tensordesc<T[b0, b1, ...]>`` (as ``aot/compile.py`` ``job_for`` writes it) -> its
    element type and block."""
    dtype, block = ty[len("tensordesc<") : ty.index("]")].split("[")
    return dtype, tuple(int(b) for b in block.split(","))


def gluon_signature(signature: Signature) -> dict[str, str]:
    """``signature`` as a Gluon kernel is compiled: each descriptor type with the default
    NVMMA shared layout of its block and element type."""
    from triton.experimental.gluon import language as gl

    out = {}
    for name, ty in signature:
        if ty.startswith("tensordesc<"):
            dtype, block = _described(ty)
            layout = gl.NVMMASharedLayout.get_default_for(list(block), gl.dtype(dtype))
            ty = f"{ty[:-1]},{layout!r}>"
        out[name] = ty
    return out


def descriptor_record(signature: Signature, md: Any) -> dict[str, Any]:
    """What the loader needs of a variant's descriptors and global scratch: per descriptor
    argument (in order), its box, swizzle and element type when Triton lowered it to TMA
    (None otherwise), and the scratch bytes per program. Empty for a plain kernel."""
    out: dict[str, Any] = {}
    described = [t for _, t in signature if t.startswith("tensordesc")]
    if described:
        metas = list(getattr(md, "tensordesc_meta", None) or [None] * len(described))
        out["descriptors"] = [
            None if m is None else {
                "block": [int(b) for b in m["block_size"]],
                "swizzle": int(m["swizzle"]),
                "elem_type": _TMA_HOST_TYPE.get(int(m["elem_type"]), int(m["elem_type"])),
                "elem_size": int(m["elem_size"]),
                "fp4_padded": bool(m.get("fp4_padded", False)),
            }
            for m in metas
        ]  # fmt: skip
    size = int(getattr(md, "global_scratch_size", 0) or 0)
    if size:
        out["global_scratch"] = size
        out["global_scratch_align"] = int(getattr(md, "global_scratch_align", 1) or 1)
    return out


def descriptor_specs(signature: Signature, rec: dict[str, Any]) -> tuple[DescriptorSpec, ...]:
    """The manifest's record of each descriptor argument of a compiled variant, in order,
    from its compile record (``descriptor_record``)."""
    names = [(n, t) for n, t in signature if t.startswith("tensordesc")]
    metas = rec.get("descriptors") or [None] * len(names)
    out = []
    for (name, ty), m in zip(names, metas, strict=True):
        _, block = _described(ty)
        if m is None:
            out.append(DescriptorSpec(name, block, tma=False))
            continue
        if m.get("fp4_padded"):
            raise ValueError(f"descriptor {name!r}: packed fp4 tensors are not supported")
        # The box may be narrower than the block: Triton splits a copy wider than the
        # swizzle span into several, and encodes the map with the box it copies.
        box = tuple(m["block"])
        if len(box) != len(block):
            raise ValueError(f"descriptor {name!r}: Triton lowered it with the box {list(box)}, "
                             f"of another rank than its block {list(block)}")  # fmt: skip
        spec = DescriptorSpec(name, box, True, m["swizzle"], m["elem_type"], m["elem_size"])
        out.append(spec)
    return tuple(out)
