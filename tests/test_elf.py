"""aot/elf.py: the DT_NEEDED list of a shared object, as readelf -d prints it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from aot.elf import needed_libraries

torch = pytest.importorskip("torch")
LIB = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"


def test_needed_libraries_agree_with_readelf() -> None:
    names = needed_libraries(LIB.read_bytes())
    assert "libc10.so" in names and any(n.startswith("libstdc++.so") for n in names)
    if shutil.which("readelf"):
        out = subprocess.run(["readelf", "-d", str(LIB)], capture_output=True, text=True).stdout
        want = [ln.split("[")[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
        assert names == want


def test_bad_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="not a 64-bit little-endian ELF file"):
        needed_libraries(b"#!/bin/sh\n")
    with pytest.raises(ValueError, match="damaged ELF file"):
        needed_libraries(LIB.read_bytes()[:4096])
