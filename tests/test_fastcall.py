"""The fast call path (loader/fastcall.py) against the checked path, on the fake driver.

The checked path (``Kernel._call_checked``: convert, _instance, select) is the reference:
every call the fast path answers must launch exactly what the checked path launches, and
every call it cannot answer must reach the checked path and its error message.
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loader
from loader import cubin, driver
from loader import manifest as mf
from loader.buckets import kernel_grid
from loader.bundle import Kernel
from loader.fastcall import FastPath, ParamBuffer
from tests import handmade
from tests.fakecuda import FakeArray, FakeLib, FakeTensor, Launch


@pytest.fixture
def kernel(fake: FakeLib, tmp_path: Path) -> Kernel:
    return loader.open(handmade.write(tmp_path / "h.aotc")).kernel("scale")


def args_for(
    m: int,
    n: int = 256,
    stride: int = 1,
    x: int = 0x10000,
    dtype: str = "torch.float16",
    scale: float = 2.0,
) -> tuple[Any, ...]:
    return (FakeTensor(x, dtype), FakeTensor(0x20000, dtype), m, n, stride, scale)


def checked_launch(fake: FakeLib, k: Kernel, args: tuple[Any, ...]) -> Launch | None:
    before = len(fake.launches)
    k._call_checked(args, None, None)
    return fake.launches[-1] if len(fake.launches) > before else None


def fast_launch(
    fake: FakeLib, k: Kernel, args: tuple[Any, ...], monkeypatch: pytest.MonkeyPatch
) -> Launch | None:
    """Call ``k`` and insist that the checked path is not used."""

    def no_checked_path(*a: Any) -> None:
        raise AssertionError("the fast path fell back to the checked path")

    before = len(fake.launches)
    with monkeypatch.context() as mp:
        mp.setattr(k, "_call_checked", no_checked_path)
        k(*args)
    return fake.launches[-1] if len(fake.launches) > before else None


# M values around every bucket bound (1, 16, 256) and at the int32 ends.
M_VALUES = st.one_of(
    st.sampled_from([-1, 0, 1, 2, 15, 16, 17, 255, 256, 257, 2**31 - 1]),
    st.integers(-(2**31), 2**31 - 1),
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    m=M_VALUES,
    n=st.sampled_from([1, 16, 250, 256, 4096, 2**20 + 16]),
    stride=st.sampled_from([-16, 0, 1, 2, 16, 33]),
    x=st.sampled_from([0x10000, 0x10008, 0x10010, 0x10001]),
    dtype=st.sampled_from(["torch.float16", "torch.bfloat16"]),
    scale=st.one_of(st.floats(width=32, allow_nan=False), st.integers(-(2**24), 2**24)),
)
def test_fast_path_launches_what_the_checked_path_launches(
    fake: FakeLib,
    kernel: Kernel,
    monkeypatch: pytest.MonkeyPatch,
    m: int,
    n: int,
    stride: int,
    x: int,
    dtype: str,
    scale: float,
) -> None:
    args = args_for(m, n, stride, x, dtype, scale)
    expected = checked_launch(fake, kernel, args)  # also teaches the fast path
    found = kernel._fast.lookup(args)
    assert found is not None
    values, seen = kernel.convert(args)
    assert list(found[1]) == values
    inst = kernel._instance(seen, None)
    assert found[0] is kernel.select(values, inst)[1]  # same bucket and variant
    assert fast_launch(fake, kernel, args, monkeypatch) == expected
    if m > 0:
        assert expected is not None and expected.grid[0] > 0


def test_fast_path_is_taken_for_repeated_signatures(
    fake: FakeLib, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel(*args_for(20))
    for m in (1, 20, 300):
        assert fast_launch(fake, kernel, args_for(m, x=0x30000 + 16 * m), monkeypatch)
    # An int for an fp32 parameter the grid does not read is taken as it is, too.
    assert kernel._fast.lookup(args_for(5, scale=2)) is None  # an int there is new
    kernel(*args_for(5, scale=2))
    assert fast_launch(fake, kernel, args_for(6, scale=3), monkeypatch)
    assert fake.launches[-1].params[4] & 0xFFFFFFFF == struct.unpack("<I", struct.pack("<f", 3))[0]


class IntLike:
    """An integer that is not an int (numpy's, say): the checked path converts it."""

    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_scalars_the_checked_path_converts_always_take_it(fake: FakeLib, kernel: Kernel) -> None:
    for _ in range(2):
        kernel(*args_for(8)[:2], IntLike(20), 256, 1, 2.0)
        kernel(*args_for(8)[:2], 20, 256, True, 2.0)  # a bool is an int for i32
    assert [launch.params[2] & 0xFFFFFFFF for launch in fake.launches] == [20] * 4
    assert len(kernel._fast._known) == 1  # only (int, int, bool, float)


def test_raw_pointers_and_array_interface_take_the_checked_path(
    fake: FakeLib, kernel: Kernel
) -> None:
    kernel(0x10000, 0x20000, 8, 256, 1, 1.0, dtypes={"T": "fp16"})
    kernel(FakeArray(0x10000), FakeArray(0x20000), 8, 256, 1, 1.0)
    assert kernel._fast.lookup((FakeArray(0x10000), FakeArray(0x20000), 8, 256, 1, 1.0)) is None
    assert kernel._fast.lookup((0x10000, 0x20000, 8, 256, 1, 1.0)) is None
    assert len(fake.launches) == 2 and not kernel._fast._known


def test_bad_call_does_not_poison_the_cache(fake: FakeLib, kernel: Kernel) -> None:
    bf16 = FakeTensor(0x10000, "torch.bfloat16")
    mixed = (bf16, FakeTensor(0x20000), 8, 256, 1, 1.0)
    for _ in range(2):
        with pytest.raises(loader.ArgumentError, match="'out_ptr' has element type fp16"):
            kernel(*mixed)
    assert not kernel._fast._known and not fake.launches
    kernel(*args_for(8))
    kernel(*args_for(8, dtype="torch.bfloat16"))
    assert len(kernel._fast._known) == 2 and len(fake.launches) == 2
    with pytest.raises(loader.ArgumentError, match="'out_ptr' has element type fp16"):
        kernel(*mixed)  # each tensor's dtype is part of the signature
    with pytest.raises(loader.ArgumentError, match="expected an integer"):
        kernel(*args_for(8)[:2], 8.0, 256, 1, 1.0)
    assert len(kernel._fast._known) == 2 and len(fake.launches) == 2
    kernel(*args_for(9))
    assert fake.launches[-1].params[2] & 0xFFFFFFFF == 9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (args_for(8)[:5], "takes 6 arguments"),
        ((*args_for(8), 1), "takes 6 arguments"),
        ((FakeTensor(0x10, is_cuda=False), *args_for(8)[1:]), "not a CUDA device"),
        ((FakeTensor(0), *args_for(8)[1:]), "'x_ptr': null pointer"),
        (
            args_for(2**31),
            "argument 'M': 2147483648 does not fit in i32, .* "
            '\\(signature = \\{ M = "i64" \\}\\) and rebuild',
        ),
        (args_for(-(2**31) - 1), "argument 'M': -2147483649 does not fit in i32"),
        (args_for(8, n=2**40), "argument 'N': 1099511627776 does not fit in i32"),
        (args_for(8, scale="x"), "'scale': expected a number"),  # type: ignore[arg-type]
    ],
)
def test_errors_after_the_signature_is_known(
    fake: FakeLib, kernel: Kernel, args: tuple[Any, ...], message: str
) -> None:
    kernel(*args_for(8))
    with pytest.raises(loader.ArgumentError, match=message):
        kernel(*args)
    assert len(fake.launches) == 1


def test_fp32_beyond_range_launches_as_inf(fake: FakeLib, kernel: Kernel) -> None:
    kernel(*args_for(8))
    kernel(*args_for(8, scale=1e39))  # struct refuses to pack it; the checked path rounds
    inf = struct.unpack("<I", struct.pack("<f", float("inf")))[0]
    assert fake.launches[-1].params[4] & 0xFFFFFFFF == inf
    kernel(0x10000, 0x20000, 8, 256, 1, -1e39, dtypes={"T": "fp16"})
    assert fake.launches[-1].params[4] & 0xFFFFFFFF == inf | 0x80000000


def test_bad_stream_after_the_signature_is_known(fake: FakeLib, kernel: Kernel) -> None:
    kernel(*args_for(8), stream=0x7000)
    with pytest.raises(loader.ArgumentError, match="stream"):
        kernel(*args_for(8), stream="default")
    with pytest.raises(loader.ArgumentError, match="does not fit in i32"):
        kernel(*args_for(2**31), stream="default")  # the argument error comes first
    assert len(fake.launches) == 1


def test_threads_sharing_a_launcher_get_their_own_parameters(fake: FakeLib, kernel: Kernel) -> None:
    fake.yield_in_launch = True
    threads, calls = 8, 150
    kernel(*args_for(300))
    fake.launches.clear()
    errors: list[BaseException] = []

    def hammer(t: int) -> None:
        x, out = 0x1000000 * (t + 1), 0x1000000 * (t + 1) + 0x800000
        try:
            for i in range(calls):
                m = 300 + 1000 * t + i  # same bucket and variant: one shared buffer
                kernel(FakeTensor(x), FakeTensor(out), m, 256, 1, float(i), stream=0x7000 + t)
        except BaseException as exc:
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        pool = [threading.Thread(target=hammer, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors
    assert len(fake.launches) == threads * calls
    seen = set()
    for launch in fake.launches:
        t = launch.stream - 0x7000
        x = 0x1000000 * (t + 1)
        m = launch.params[2] & 0xFFFFFFFF
        i = m - 300 - 1000 * t
        assert launch.params[0] == x and launch.params[1] == x + 0x800000, launch
        assert 0 <= i < calls and launch.grid == (-(-m // 128), 2, 1)
        assert struct.unpack("<f", struct.pack("<I", launch.params[4] & 0xFFFFFFFF))[0] == i
        seen.add((t, i))
    assert len(seen) == threads * calls


def test_thread_without_a_current_context_gets_ours(fake: FakeLib, tmp_path: Path) -> None:
    fake.thread_contexts = True
    k = loader.open(handmade.write(tmp_path / "h.aotc")).kernel("scale")
    k(*args_for(8))  # the opening thread has the context current
    results: list[BaseException | None] = []

    def call() -> None:
        try:
            k(*args_for(9))
            results.append(None)
        except BaseException as exc:
            results.append(exc)

    th = threading.Thread(target=call)
    th.start()
    th.join()
    assert results == [None]
    assert [launch.params[2] & 0xFFFFFFFF for launch in fake.launches] == [8, 9]


class FakeTorch(types.ModuleType):
    """Just what loader.args.CurrentStream reads of torch."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.asked: list[int] = []
        self.cuda = types.SimpleNamespace(is_initialized=lambda: True)
        self._C = types.SimpleNamespace(_cuda_getCurrentRawStream=self.current_stream)

    def current_stream(self, index: int) -> int:
        self.asked.append(index)
        return 0x9000 + index


@pytest.mark.parametrize(("opened", "current"), [(1, None), (None, 1), (None, None)])
def test_torch_current_stream_of_the_bundle_device(
    fake: FakeLib,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened: int | None,
    current: int | None,
) -> None:
    fake.devices = 2
    if current is not None:  # a context (torch's, say) is current when the bundle opens
        fake.context, fake.context_device = 0xC1, current
    torch = FakeTorch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    k = loader.open(handmade.write(tmp_path / "h.aotc"), device=opened).kernel("scale")
    k(*args_for(8))
    k(*args_for(8))
    device = opened if opened is not None else current or 0
    assert torch.asked == [device, device]
    assert [launch.stream for launch in fake.launches] == [0x9000 + device] * 2


# -- the generated lookup, bucket choice and parameter buffer, without a bundle ---------


class Marker:
    """Stands in for a launcher: no assumptions, and it knows its bucket."""

    fits = None

    def __init__(self, bucket: int):
        self.bucket = bucket


def params(*types: str) -> list[mf.Param]:
    return [mf.Param(f"p{i}", t) for i, t in enumerate(types)]


@given(
    st.lists(
        st.lists(st.integers(1, 10**6), min_size=1, max_size=5, unique=True).map(sorted),
        max_size=3,
    ),
    st.data(),
)
def test_generated_lookup_picks_the_bucket_of_the_grid(
    boundaries: list[list[int]], data: st.DataObject
) -> None:
    keys = len(boundaries)
    grid = kernel_grid([f"p{i}" for i in range(1, keys + 1)], boundaries)
    fp = FastPath(params("*T", *["i32"] * keys, "i1"), range(1, keys + 1), grid, ())
    count = 1
    for b in boundaries:
        count *= len(b)
    table = tuple(((None, Marker(i)),) for i in range(count))
    values = [data.draw(st.integers(-10, 2 * 10**6)) for _ in range(keys)]
    args = (FakeTensor(0x100), *values, 1)
    fp.learn(args, table)  # type: ignore[arg-type]
    found = fp.lookup(args)
    assert found is not None
    assert found[0].bucket == grid.index(values)  # type: ignore[attr-defined]
    assert found[1] == (0x100, *values, 1)
    assert fp.lookup((*args[:-1], 2)) is None  # i1 takes 0 or 1 only
    assert fp.lookup((*args[:-1], 0)) is not None


def test_lookup_refuses_what_it_was_not_taught() -> None:
    fp = FastPath(params("*T", "i32", "fp32"), [1], kernel_grid(["p1"], [[16, 256]]), {"p2"})
    table = ((None, Marker(0)),), ((None, Marker(1)),)
    fp.learn((FakeTensor(0x100), 5, 2), table)  # type: ignore[arg-type]
    assert not fp._known  # p2 is read by the grid: only a float passes unconverted
    fp.learn((FakeTensor(0x100), 5, 2.0), table)  # type: ignore[arg-type]
    assert fp.lookup((FakeTensor(0x100), 300, 1.5)) is not None
    assert fp.lookup((FakeTensor(0x100), 300, 1)) is None
    assert fp.lookup((FakeTensor(0x100, "torch.float32"), 300, 1.5)) is None
    assert fp.lookup((FakeTensor(0x100, is_cuda=False), 300, 1.5)) is None
    assert fp.lookup((FakeTensor(0), 300, 1.5)) is None
    assert fp.lookup((0x100, 300, 1.5)) is None
    assert fp.lookup((FakeTensor(0x100), 300)) is None


def test_signatures_remembered_are_bounded() -> None:
    fp = FastPath(params("*T"), [], kernel_grid([], []), ())
    for i in range(100):
        fp.learn((FakeTensor(0x100, f"dtype{i}"),), ((),))
    assert len(fp._known) == 64


SCALARS = ["i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp32", "fp64"]


@given(st.lists(st.sampled_from([*SCALARS, "*T"]), max_size=12), st.integers(0, 2), st.data())
def test_param_buffer_lays_out_slots_as_c_does(
    types: list[str], scratch: int, data: st.DataObject
) -> None:
    buf = ParamBuffer(types, list(range(len(types))), scratch)
    ctype = [type(h) for h in buf.holders]
    assert len(ctype) == len(types) + scratch

    class Struct(ctypes.Structure):
        _fields_ = [(f"f{i}", t) for i, t in enumerate(ctype)]

    assert buf.base % 64 == 0
    base = buf.base
    assert [a - base for a in buf.params] == [
        getattr(Struct, f"f{i}").offset for i in range(len(ctype))
    ]
    values = []
    for t in types:
        if t.startswith("fp"):
            values.append(data.draw(st.floats(width=32, allow_nan=False)))
        elif t in ("i1", "u1"):
            values.append(data.draw(st.integers(0, 1)))
        else:
            bits = 64 if t[0] == "*" else int(t[1:])
            lo, hi = (0, 2**bits - 1) if t[0] in "u*" else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
            values.append(data.draw(st.integers(lo, hi)))
    buf.pack(values)
    assert [h.value for h in buf.holders] == [*values, *[0] * scratch]


CALL_RECORDER = r"""
struct call {
    void *f; unsigned gx, gy, gz, bx, by, bz, shared; void *stream; void **params; void **extra;
};
struct call last;
unsigned long long first_param;

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    struct call c = {f, gx, gy, gz, bx, by, bz, shared, stream, params, extra};
    last = c;
    /* the first parameter, from its pointer, or at offset 0 of a buffer passed whole */
    first_param = *(unsigned long long *)(params ? params[0] : extra[1]);
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_untyped_launch_passes_what_cuLaunchKernel_declares(fake: FakeLib, tmp_path: Path) -> None:
    src, lib_path = tmp_path / "rec.c", tmp_path / "rec.so"
    src.write_text(CALL_RECORDER)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", lib_path, src], check=True)
    rec = ctypes.CDLL(str(lib_path))
    fake.cuLaunchKernel = rec.cuLaunchKernel  # type: ignore[method-assign]
    driver.install(driver.Driver(fake))

    class Call(ctypes.Structure):
        _fields_ = [
            ("f", ctypes.c_void_p),
            *[(n, ctypes.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shared")],
            ("stream", ctypes.c_void_p),
            ("params", ctypes.c_void_p),
            ("extra", ctypes.c_void_p),
        ]

    k = loader.open(handmade.write(tmp_path / "h.aotc")).kernel("scale")
    stream = 0x7FFF_1234_5678_9ABC  # a 64-bit handle must arrive whole
    for _ in range(2):  # the checked path, then the fast path
        k(*args_for(2**31 - 1, x=0xDEAD_BEEF_0000), stream=stream)
        last = Call.in_dll(rec, "last")
        launcher = k.select(*_converted(k, args_for(2**31 - 1)))[1]
        assert last.f == launcher.function
        assert (last.gx, last.gy, last.gz) == (2**31 // 128, 2, 1)
        assert (last.bx, last.by, last.bz, last.shared) == (128, 1, 1, launcher.shared)
        assert last.stream == stream
        # The cubin's layout is the buffer's, so the buffer is passed whole, with its size.
        extra = (ctypes.c_void_p * 5).from_address(last.extra)
        assert last.params is None and last.extra == ctypes.addressof(launcher.extra)
        assert (extra[0], extra[2], extra[4]) == (1, 2, None)
        assert extra[1] == launcher.params[0]  # the first slot's address: the buffer's base
        end = ctypes.addressof(launcher.holders[-1]) + ctypes.sizeof(launcher.holders[-1])
        assert ctypes.c_size_t.from_address(extra[3]).value == end - launcher.params[0]
        assert ctypes.c_ulonglong.in_dll(rec, "first_param").value == 0xDEAD_BEEF_0000


def _converted(k: Kernel, args: tuple[Any, ...]) -> tuple[list[Any], Any]:
    values, seen = k.convert(args)
    return values, k._instance(seen, None)


def test_cpu_benchmark_runs() -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "host_path_cpu.py"
    out = subprocess.run(
        [sys.executable, str(script), "-n", "50", "--repeats", "1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "fast path: k(*tensors)" in out and "checked path" in out


def test_param_buffer_places_a_tensor_map_at_64_bytes_by_value() -> None:
    # A CUtensorMap parameter is 128 bytes aligned to 64 (CUDA's alignas(64)), then the
    # descriptor's shape (i32) and strides (i64), as Triton's launcher passes them.
    buf = ParamBuffer(["*", "i32", "tensormap", "i32", "i32", "i64", "i64"], range(7), 2)
    assert [a - buf.base for a in buf.params] == [0, 8, 64, 192, 196, 200, 208, 216, 224]
    tmap = bytes(range(128))
    buf.pack([0xABC0, 7, tmap, 3, 4, 40, 1])
    assert bytes(buf.holders[2]) == tmap
    values = [buf.holders[i].value for i in (0, 1, 3, 4, 5, 6, 7, 8)]
    assert values == [0xABC0, 7, 3, 4, 40, 1, 0, 0]


def test_the_buffer_is_laid_out_as_the_cubin_lays_out_its_parameters(
    fake: FakeLib, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver copies the buffer whole to the kernel's parameter space, so each slot
    sits at the cubin's offset for it (a Hopper cubin starts its first tensor map at 48,
    not 0); a cubin whose parameters overlap is refused."""
    real = cubin.param_layout
    shift = {"by": 16}

    def moved(image: bytes, function: str) -> tuple[tuple[int, int], ...]:
        return tuple((offset + shift["by"] * (i > 0), size)
                     for i, (offset, size) in enumerate(real(image, function)))  # fmt: skip

    monkeypatch.setattr(cubin, "param_layout", moved)
    path = handmade.write(tmp_path / "h.aotc")
    k = loader.open(path).kernel("scale")
    k(*args_for(1000, x=0xDEAD_BEEF_0000))
    launcher = k.select(*_converted(k, args_for(1000)))[1]
    image = loader.open(path).read_entry(launcher.variant.entry)
    want = [offset for offset, _ in moved(image, launcher.variant.function)]
    assert [ctypes.addressof(h) - launcher.params[0] for h in launcher.holders] == want
    assert fake.launches[-1].params[:2] == [0xDEAD_BEEF_0000, 0x20000]  # read at those offsets

    shift["by"] = -4  # the second parameter inside the first
    with pytest.raises(loader.BundleError, match="overlap"):
        loader.open(path).kernel("scale")(*args_for(1000))
