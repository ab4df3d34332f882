"""The shared libraries an ELF shared object asks for (its DT_NEEDED entries), read from
its bytes: what ``readelf -d`` prints as NEEDED, without binutils."""

from __future__ import annotations

import struct

_SHT_DYNAMIC = 6
_DT_NEEDED = 1


def needed_libraries(data: bytes) -> list[str]:
    """DT_NEEDED names of a 64-bit little-endian ELF file, in order. ``ValueError`` if the
    bytes are not such a file or are cut short."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    try:
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [
            struct.unpack_from("<IIQQQQII", data, shoff + i * shentsize) for i in range(shnum)
        ]
        names: list[str] = []
        for _, kind, _, _, offset, size, link, _ in sections:
            if kind != _SHT_DYNAMIC:
                continue
            strtab = sections[link][4]
            for pos in range(offset, offset + size, 16):
                tag, value = struct.unpack_from("<qQ", data, pos)
                if tag == _DT_NEEDED:
                    end = data.index(b"\0", strtab + value)
                    names.append(data[strtab + value : end].decode())
        return names
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"damaged ELF file: {exc}") from exc
