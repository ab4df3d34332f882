"""``Kernel.host_path`` (loader/profile.py): each piece of a call repeats exactly what the
call launched, on the fake driver; the benchmarks time these pieces."""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path

import pytest

import loader
from loader import driver
from loader.kernel import Kernel
from tests import handmade
from tests.fakecuda import FakeLib, FakeTensor


def scale(tmp_path: Path) -> Kernel:
    return loader.open(handmade.write(tmp_path / "h.aotc")).kernel("scale")


ARGS = (FakeTensor(0x10000), FakeTensor(0x20000), 20, 256, 1, 2.0)


def test_every_piece_launches_what_the_call_launched(fake: FakeLib, tmp_path: Path) -> None:
    k = scale(tmp_path)
    path = k.host_path(*ARGS)
    assert len(fake.launches) == 1  # the call it was made from
    call = fake.launches[-1]
    assert path.variant == k.variant_for(*ARGS)
    assert path.lookup() is not None
    assert path.stream() == 0  # no torch: the legacy default stream
    assert path.pack_grid() == call.grid
    for piece in (path.call, path.checked, path.launch, path.driver_call):
        before = len(fake.launches)
        piece()
        assert len(fake.launches) == before + 1, piece
        assert fake.launches[-1] == call, piece


def test_raw_pointers_do_not_take_the_fast_path(fake: FakeLib, tmp_path: Path) -> None:
    k = scale(tmp_path)
    with pytest.raises(loader.ArgumentError, match=r"scale.host_path\(\): .* fast path"):
        k.host_path(0x10000, 0x20000, 20, 256, 1, 2.0, dtypes={"T": "fp16"})


def test_the_typed_driver_call_reaches_the_c_function(fake: FakeLib, tmp_path: Path) -> None:
    # A C function that returns 0 stands for cuLaunchKernel, as in benchmarks/host_path_cpu.py:
    # the typed entry converts its arguments through argtypes, which a Python stand-in skips.
    noop = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")["fegetround"]
    noop.restype = ctypes.c_int
    if noop() != 0:
        pytest.skip("fegetround() is not 0 here")
    fake.cuLaunchKernel = noop  # type: ignore[method-assign]
    driver.install(driver.Driver(fake))
    path = scale(tmp_path).host_path(*ARGS)
    assert path.driver_call_typed() == 0
    assert path.driver_call() == 0
