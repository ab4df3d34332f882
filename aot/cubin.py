"""Reading the facts a build needs straight out of a cubin (an NVIDIA ELF file).

We read the target arch from the ELF header, the register count from ``.nv.info``
(EIATTR_REGCOUNT) and the kernel's parameter count from ``.nv.info.<kernel>``
(EIATTR_KPARAM_INFO), so the ABI recorded in the manifest is checked against the binary
itself rather than trusted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EIATTR_REGCOUNT = 0x2F
EIATTR_KPARAM_INFO = 0x17
_EIFMT_SVAL = 4  # attribute followed by a u16 size and that many bytes
_EIFMT_HVAL = 3  # attribute followed by a u16 value
_EIFMT_NVAL = 1  # attribute alone
_EIFMT_BVAL = 2  # attribute followed by a u8 value


class CubinError(ValueError):
    pass


@dataclass(frozen=True)
class CubinInfo:
    sm: int  # e.g. 90
    regs: dict[str, int]  # function -> registers per thread
    params: dict[str, int]  # function -> number of kernel parameters


def inspect(data: bytes) -> CubinInfo:
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise CubinError("not a 64-bit ELF file")
    (e_flags,) = struct.unpack_from("<I", data, 0x30)
    (e_shoff,) = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [
        struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize) for i in range(e_shnum)
    ]
    strtab_off = sections[e_shstrndx][4]

    def sname(off: int) -> str:
        end = data.index(b"\0", strtab_off + off)
        return data[strtab_off + off : end].decode()

    names = [sname(s[0]) for s in sections]
    symbols = _symbols(data, sections, names)
    regs: dict[str, int] = {}
    params: dict[str, int] = {}
    for name, sec in zip(names, sections, strict=True):
        if name == ".nv.info":
            for attr, payload in _attributes(data[sec[4] : sec[4] + sec[5]]):
                if attr == EIATTR_REGCOUNT and len(payload) == 8:
                    sym, count = struct.unpack("<II", payload)
                    regs[symbols.get(sym, str(sym))] = count
        elif name.startswith(".nv.info."):
            fn = name.removeprefix(".nv.info.")
            n = sum(
                1 for a, _ in _attributes(data[sec[4] : sec[4] + sec[5]]) if a == EIATTR_KPARAM_INFO
            )
            params[fn] = n
    return CubinInfo(sm=e_flags & 0xFF, regs=regs, params=params)


def _attributes(blob: bytes) -> list[tuple[int, bytes]]:
    out = []
    i = 0
    while i + 2 <= len(blob):
        fmt, attr = blob[i], blob[i + 1]
        if fmt == _EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", blob, i + 2)
            out.append((attr, blob[i + 4 : i + 4 + size]))
            i += 4 + size
        elif fmt == _EIFMT_HVAL:
            out.append((attr, blob[i + 2 : i + 4]))
            i += 4
        elif fmt == _EIFMT_BVAL:
            out.append((attr, blob[i + 2 : i + 3]))
            i += 4  # every attribute is 4-byte aligned
        elif fmt == _EIFMT_NVAL:
            out.append((attr, b""))
            i += 4
        else:
            raise CubinError(f"unknown .nv.info attribute format {fmt}")
    return out


def _symbols(data: bytes, sections: list[tuple[int, ...]], names: list[str]) -> dict[int, str]:
    """Symbol index -> name, from .symtab and the string table it links to."""
    for name, sec in zip(names, sections, strict=True):
        if name == ".symtab":
            strtab = sections[sec[6]]
            out = {}
            entsize = sec[9] or 24
            for idx in range(sec[5] // entsize):
                (st_name,) = struct.unpack_from("<I", data, sec[4] + idx * entsize)
                start = strtab[4] + st_name
                out[idx] = data[start : data.index(b"\0", start)].decode()
            return out
    return {}
