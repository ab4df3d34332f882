"""Minimal cubins made by hand: an ELF file with the parameter table the loader checks
(``.nv.info.<kernel>``, EIATTR_KPARAM_INFO) and a note carrying any marker bytes, so that
CPU tests can load "cubins" through the same checks as real ones."""

from __future__ import annotations

import struct
from collections.abc import Sequence

# Bytes per parameter, by manifest type (pointers are 8), as ptxas lays them out.
SIZES = {"i1": 1, "i8": 1, "u1": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4, "u32": 4,
         "fp32": 4, "i64": 8, "u64": 8, "fp64": 8}  # fmt: skip


def abi_sizes(types: Sequence[str], scratch: int = 2) -> list[int]:
    """Parameter sizes of a kernel taking ``types`` then ``scratch`` pointers (Triton's)."""
    return [8 if t.startswith("*") else SIZES[t] for t in types] + [8] * scratch


def kparam_table(sizes: Sequence[int]) -> bytes:
    """An ``.nv.info.<kernel>`` section: one EIATTR_KPARAM_INFO per parameter."""
    out, offset = b"", 0
    for ordinal, size in enumerate(sizes):
        offset = -(-offset // size) * size if size else offset
        flags = (size << 18) | (0x1F << 12)
        out += struct.pack("<BBHIHHI", 4, 0x17, 12, 0, ordinal, offset, flags)
        offset += size
    return out


def make(function: str, sizes: Sequence[int], note: bytes = b"", sm: int = 90) -> bytes:
    """A 64-bit ELF cubin for ``sm`` whose kernel ``function`` takes parameters of
    ``sizes`` bytes; ``note`` is stored first, right after the ELF header."""
    sections = [
        (".note.aotc", note),
        (f".nv.info.{function}", kparam_table(sizes)),
    ]
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in sections) + b".shstrtab\0"
    sections.append((".shstrtab", names))
    body, headers, name_at = b"", [b"\0" * 64], 1
    for name, data in sections:
        offset = 64 + len(body)
        sh_type = 3 if name == ".shstrtab" else 0x70000000
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, sh_type, 0, 0, offset, len(data),
                                   0, 0, 1, 0))  # fmt: skip
        name_at += len(name) + 1
        body += data + b"\0" * (-len(data) % 8)
    shoff = 64 + len(body)
    ident = b"\x7fELF\x02\x01\x01\x33\x07" + b"\0" * 7
    header = ident + struct.pack(
        "<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, shoff, sm | (sm << 16), 64, 0, 0, 64,
        len(headers), len(headers) - 1,
    )  # fmt: skip
    return header + body + b"".join(headers)
