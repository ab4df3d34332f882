"""The loader's logic against a fake driver: target, bucket and variant choice, argument
packing, errors, lazy loading. The same paths run for real in tests/gpu."""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path

import pytest

import loader
from loader import driver
from tests import handmade
from tests.fakecuda import FakeArray, FakeLib, FakeTensor


@pytest.fixture
def fake() -> FakeLib:
    lib = FakeLib()
    driver.install(driver.Driver(lib))
    yield lib
    driver.install(None)


@pytest.fixture
def bundle_path(tmp_path: Path) -> Path:
    return handmade.write(tmp_path / "h.aotc")


def call_args(m: int, n: int = 256, stride: int = 1, x: int = 0x10000, out: int = 0x20000):
    return [FakeTensor(x), FakeTensor(out), m, n, stride, 2.0]


def test_picks_exact_arch_and_lists_targets_when_none_fits(fake: FakeLib, tmp_path: Path) -> None:
    b = loader.open(handmade.write(tmp_path / "a.aotc"))
    assert b.target.name == "sm_90"
    fake.cc = (7, 5)
    fake.name = "Tesla T4"
    with pytest.raises(loader.NoTargetError) as e:
        loader.open(tmp_path / "a.aotc")
    assert "Tesla T4, sm_75" in str(e.value) and "sm_90 (sm_90), sm_80 (sm_80)" in str(e.value)
    assert "Add sm_75" in str(e.value)


def test_ampere_cubin_runs_on_later_ampere(fake: FakeLib, tmp_path: Path) -> None:
    fake.cc, fake.name = (8, 6), "NVIDIA A10"
    assert loader.open(handmade.write(tmp_path / "a.aotc")).target.name == "sm_80"
    fake.cc = (9, 0)  # sm_90a code runs on 9.0 only; an sm_80-only bundle does not run there
    with pytest.raises(loader.NoTargetError):
        loader.open(handmade.write(tmp_path / "b.aotc", targets=("sm_80",)))


def test_product_target_preferred_over_arch(fake: FakeLib, tmp_path: Path) -> None:
    path = handmade.write(tmp_path / "p.aotc", targets=("sm_90", "H100", "H200"))
    fake.name = "NVIDIA H200"
    assert loader.open(path).target.name == "H200"
    fake.name = "NVIDIA H100 80GB HBM3"
    assert loader.open(path).target.name == "H100"
    fake.name = "NVIDIA GH200 480GB"
    assert loader.open(path).target.name == "sm_90"


@pytest.mark.parametrize(("m", "bucket"), [(1, 0), (2, 1), (16, 1), (17, 2), (256, 2), (100000, 2)])
def test_bucket_choice_and_grid(fake: FakeLib, bundle_path: Path, m: int, bucket: int) -> None:
    k = loader.open(bundle_path).kernel("scale")
    k(*call_args(m))
    launch = fake.launches[-1]
    block = (16, 64, 128)[bucket]
    assert launch.grid == (-(-m // block), 2, 1)
    assert launch.block == 128 and launch.shared == 1024 * block // 16
    assert fake.functions[launch.function] == "scale_kernel"


def test_specialized_variant_only_when_assumptions_hold(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    assert k.variant_for(*call_args(20)).id == "c2-s"
    assert k.variant_for(*call_args(20, n=250)).id == "c2-g"  # N % 16 != 0
    assert k.variant_for(*call_args(20, stride=2)).id == "c2-g"  # stride != 1
    assert k.variant_for(*call_args(20, x=0x10008)).id == "c2-g"  # misaligned pointer


def test_parameters_packed_in_abi_order(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    k(*call_args(20))  # specialized: stride==1 is compiled in, so it is not passed
    words = fake.launches[-1].params
    assert words[0] == 0x10000 and words[1] == 0x20000
    assert words[2] & 0xFFFFFFFF == 20 and words[3] & 0xFFFFFFFF == 256
    assert struct.unpack("<f", struct.pack("<I", words[4] & 0xFFFFFFFF))[0] == 2.0
    assert words[5:] == [0, 0]  # Triton 3.6's global and profile scratch pointers
    k(*call_args(20, stride=3))  # generic: every argument is passed
    words = fake.launches[-1].params
    assert len(words) == 8 and words[4] & 0xFFFFFFFF == 3


def test_dtype_binding(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    bf = [
        FakeTensor(0x10000, "torch.bfloat16"),
        FakeTensor(0x20000, "torch.bfloat16"),
        8,
        256,
        1,
        1.0,
    ]
    k(*bf)
    entry_fp16 = fake.modules[-1]
    assert b"bf16" in entry_fp16
    mixed = [FakeTensor(0x10000, "torch.bfloat16"), FakeTensor(0x20000), 8, 256, 1, 1.0]
    with pytest.raises(
        loader.ArgumentError, match="'out_ptr' has element type fp16, expected bf16"
    ):
        k(*mixed)
    with pytest.raises(loader.ArgumentError, match="no variant for element types"):
        k(
            FakeTensor(0x10000, "torch.float32"),
            FakeTensor(0x20000, "torch.float32"),
            8,
            256,
            1,
            1.0,
        )
    with pytest.raises(loader.ArgumentError, match="cannot tell the element type T"):
        k(0x10000, 0x20000, 8, 256, 1, 1.0)
    k(0x10000, 0x20000, 8, 256, 1, 1.0, dtypes={"T": "bf16"})
    k(FakeArray(0x10000), FakeArray(0x20000), 8, 256, 1, 1.0)  # __cuda_array_interface__
    assert b"fp16" in fake.modules[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([FakeTensor(1)], "takes 6 arguments"),
        ([FakeTensor(0), FakeTensor(0x20000), 8, 256, 1, 1.0], "'x_ptr': null pointer"),
        ([FakeTensor(0x10, is_cuda=False), FakeTensor(0x20000), 8, 256, 1, 1.0], "not a CUDA"),
        (["a", FakeTensor(0x20000), 8, 256, 1, 1.0], "expected a CUDA tensor"),
        ([FakeTensor(16), FakeTensor(32), 2**31, 256, 1, 1.0], "does not fit in i32"),
        ([FakeTensor(16), FakeTensor(32), 1.5, 256, 1, 1.0], "expected an integer"),
        ([FakeTensor(16), FakeTensor(32), 4, 256, 1, "x"], "expected a number"),
    ],
)
def test_bad_arguments(fake: FakeLib, bundle_path: Path, args: list, message: str) -> None:
    k = loader.open(bundle_path).kernel("scale")
    with pytest.raises(loader.ArgumentError, match=message):
        k(*args)
    assert not fake.launches


def test_modules_load_lazily_once_and_only_for_this_gpu(fake: FakeLib, bundle_path: Path) -> None:
    b = loader.open(bundle_path)
    assert fake.modules == []
    k = b.kernel("scale")
    for _ in range(3):
        k(*call_args(5))
    assert len(fake.modules) == 1 and b"fake cubin cubin/sm_90" in fake.modules[0]
    assert b.warmup() == 12  # 3 buckets × 2 specializations × 2 dtypes, sm_90 only
    assert all(b"fake cubin cubin/sm_90" in m for m in fake.modules)
    assert len(fake.modules) == 12


def test_concurrent_first_calls_load_once(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    threads = [threading.Thread(target=k, args=call_args(5)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake.modules) == 1 and len(fake.launches) == 8


def test_stream_argument(fake: FakeLib, bundle_path: Path) -> None:
    class Stream:
        cuda_stream = 0x5000

    k = loader.open(bundle_path).kernel("scale")
    k(*call_args(5), stream=0x7000)
    assert fake.launches[-1].stream == 0x7000
    k(*call_args(5), stream=Stream())
    assert fake.launches[-1].stream == 0x5000
    with pytest.raises(loader.ArgumentError, match="stream"):
        k(*call_args(5), stream="default")


def test_launch_failure_raises_cuda_error(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    fake.fail_launch = 700
    with pytest.raises(loader.CudaError) as e:
        k(*call_args(5))
    assert e.value.name == "CUDA_ERROR_ILLEGAL_ADDRESS" and e.value.code == 700


def test_zero_grid_launches_nothing(fake: FakeLib, bundle_path: Path) -> None:
    loader.open(bundle_path).kernel("scale")(*call_args(0))
    assert fake.launches == []


def test_unknown_kernel_lists_known(fake: FakeLib, bundle_path: Path) -> None:
    with pytest.raises(KeyError, match="it has: scale"):
        loader.open(bundle_path).kernel("nope")


def test_tampered_entry_never_reaches_the_driver(fake: FakeLib, bundle_path: Path) -> None:
    data = bytearray(bundle_path.read_bytes())
    data[-5] ^= 0xFF  # inside the last payload
    bundle_path.write_bytes(bytes(data))
    b = loader.open(bundle_path)  # the manifest is intact, so open succeeds
    with pytest.raises(loader.BundleError, match="checksum"):
        b.warmup()
    assert all(b"fake cubin" in m for m in fake.modules)


def test_ctypes_holders_match_abi_types(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    k(*call_args(5))
    launcher = next(iter(k._instances.values())).choices[1][0]
    kinds = [type(h) for h in launcher.holders]
    assert kinds == [
        ctypes.c_uint64,
        ctypes.c_uint64,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_float,
        ctypes.c_uint64,
        ctypes.c_uint64,
    ]
