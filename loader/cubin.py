"""Reading facts straight out of a cubin (an NVIDIA ELF file), without the CUDA toolkit.

The builder reads the target arch from the ELF header, the register count and stack
frame from ``.nv.info`` (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and each kernel's parameters
from ``.nv.info.<kernel>`` (EIATTR_KPARAM_INFO). The loader reads the parameters again
before it hands a cubin to the driver: ``cuLaunchKernel`` copies each parameter by the
size the cubin declares from the pointers it is given, so a manifest whose ABI disagrees
with the cubin would make the driver read past the loader's buffer. The bytes are
untrusted there: every offset is checked, and anything malformed raises CubinError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

EIATTR_REGCOUNT = 0x2F
EIATTR_FRAME_SIZE = 0x11  # bytes of local memory (the stack frame) per thread
EIATTR_KPARAM_INFO = 0x17
_EIFMT_SVAL = 4  # attribute followed by a u16 size and that many bytes
_EIFMT_HVAL = 3  # attribute followed by a u16 value
_EIFMT_NVAL = 1  # attribute alone
_EIFMT_BVAL = 2  # attribute followed by a u8 value
_SECTION = struct.Struct("<IIQQQQIIQQ")
_MAX_NAME = 4096
# An attribute table larger than this is not one ptxas wrote (a kernel's parameters take
# at most 32 KiB, 16 bytes of table each).
_MAX_TABLE = 1 << 20


class CubinError(ValueError):
    pass


@dataclass(frozen=True)
class CubinInfo:
    sm: int  # e.g. 90
    regs: dict[str, int]  # function -> registers per thread
    params: dict[str, int]  # function -> number of kernel parameters
    # function -> stack frame bytes per thread; Triton allocates no local memory itself,
    # so a frame means ptxas spilled registers (STL/LDL in the SASS)
    frames: dict[str, int]


@dataclass(frozen=True)
class _Section:
    name: str
    offset: int
    size: int
    link: int
    entsize: int


def _sections(data: bytes) -> list[_Section]:
    if data[:4] != b"\x7fELF" or data[4:5] != b"\x02" or data[5:6] != b"\x01":
        raise CubinError("not a 64-bit little-endian ELF file")
    try:
        (e_shoff,) = struct.unpack_from("<Q", data, 0x28)
        e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if e_shentsize < _SECTION.size or e_shstrndx >= e_shnum:
            raise CubinError("damaged section header table")
        raw = [_SECTION.unpack_from(data, e_shoff + i * e_shentsize) for i in range(e_shnum)]
    except (struct.error, OverflowError):
        raise CubinError("truncated section header table") from None
    for s in raw:
        if s[4] + s[5] > len(data) and s[1] != 8:  # SHT_NOBITS occupies no file space
            raise CubinError("a section lies outside the file")
    strtab = raw[e_shstrndx][4]
    return [_Section(_string(data, strtab + s[0]), s[4], s[5], s[6], s[9]) for s in raw]


def _string(data: bytes, start: int) -> str:
    end = data.find(b"\0", start, start + _MAX_NAME)
    if end < 0:
        raise CubinError("unterminated name")
    try:
        return data[start:end].decode()
    except UnicodeDecodeError:
        raise CubinError("a name is not UTF-8") from None


def inspect(data: bytes) -> CubinInfo:
    sections = _sections(data)
    (e_flags,) = struct.unpack_from("<I", data, 0x30)
    symbols = _symbols(data, sections)
    regs: dict[str, int] = {}
    params: dict[str, int] = {}
    frames: dict[str, int] = {}
    per_function = {EIATTR_REGCOUNT: regs, EIATTR_FRAME_SIZE: frames}
    for sec in sections:
        if sec.name == ".nv.info":
            for attr, payload in _attributes(data, sec):
                if attr in per_function and len(payload) == 8:
                    sym, value = struct.unpack("<II", payload)
                    per_function[attr][symbols.get(sym, str(sym))] = value
        elif sec.name.startswith(".nv.info."):
            params[sec.name.removeprefix(".nv.info.")] = len(_param_layout(data, sec))
    return CubinInfo(sm=e_flags & 0xFF, regs=regs, params=params, frames=frames)


def machine_code(data: bytes) -> bytes:
    """The kernels' instructions (the ``.text.*`` sections, in file order): what two
    compiles of one kernel share when only their debug and line information differ."""
    return b"".join(data[s.offset : s.offset + s.size] for s in _sections(data)
                    if s.name.startswith(".text."))  # fmt: skip


def param_sizes(data: bytes, function: str) -> tuple[int, ...]:
    """The byte size of each of ``function``'s parameters, in order, as the cubin declares
    them. CubinError if the cubin is malformed or has no such kernel."""
    return tuple(size for _, size in param_layout(data, function))


def param_layout(data: bytes, function: str) -> tuple[tuple[int, int], ...]:
    """(offset, size) in bytes of each of ``function``'s parameters, in order, as the cubin
    declares them: where the driver copies each into the kernel's parameter space.
    CubinError if the cubin is malformed or has no such kernel."""
    for sec in _sections(data):
        if sec.name == f".nv.info.{function}":
            return _param_layout(data, sec)
    raise CubinError(f"no kernel {function!r} in the cubin")


def _param_layout(data: bytes, sec: _Section) -> tuple[tuple[int, int], ...]:
    layout: dict[int, tuple[int, int]] = {}
    for attr, payload in _attributes(data, sec):
        if attr != EIATTR_KPARAM_INFO:
            continue
        if len(payload) != 12:
            raise CubinError("damaged parameter table")
        _, ordinal, offset, flags = struct.unpack("<IHHI", payload)
        if ordinal in layout:
            raise CubinError(f"parameter {ordinal} is declared twice")
        layout[ordinal] = (offset, (flags >> 18) & 0x3FFF)
    if sorted(layout) != list(range(len(layout))):
        raise CubinError("the parameter table has gaps")
    return tuple(layout[i] for i in range(len(layout)))


def _attributes(data: bytes, sec: _Section) -> list[tuple[int, bytes]]:
    if sec.size > _MAX_TABLE:
        raise CubinError(f"an attribute table of {sec.size} bytes")
    blob = data[sec.offset : sec.offset + sec.size]
    out = []
    i = 0
    while i + 2 <= len(blob):
        fmt, attr = blob[i], blob[i + 1]
        if fmt == _EIFMT_SVAL:
            if i + 4 > len(blob):
                raise CubinError("truncated attribute")
            (size,) = struct.unpack_from("<H", blob, i + 2)
            if i + 4 + size > len(blob):
                raise CubinError("truncated attribute")
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


def _symbols(data: bytes, sections: list[_Section]) -> dict[int, str]:
    """Symbol index -> name, from .symtab and the string table it links to."""
    for sec in sections:
        if sec.name == ".symtab":
            if sec.link >= len(sections) or sec.entsize not in (0, 24):
                raise CubinError("damaged symbol table")
            strtab = sections[sec.link].offset
            out = {}
            for idx in range(sec.size // 24):
                (st_name,) = struct.unpack_from("<I", data, sec.offset + idx * 24)
                out[idx] = _string(data, strtab + st_name)
            return out
    return {}
