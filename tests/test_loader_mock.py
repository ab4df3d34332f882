"""The loader's logic against a fake driver: target, bucket and variant choice, argument
packing, errors, lazy loading. The same paths run for real in tests/gpu."""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

import loader
from aot.errors import BadBundle
from aot.inspect import verify
from loader.format import encode
from tests import cubins, handmade
from tests.fakecuda import FakeArray, FakeLib, FakeTensor


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


def test_kernel_warmup_loads_the_chosen_buckets(fake: FakeLib, bundle_path: Path) -> None:
    k = loader.open(bundle_path).kernel("scale")
    # M=2 and M=16 share a bucket; M past the last bucket is served by the last (clamped)
    assert k.warmup(M=[2, 16, 10**6]) == 8  # 2 buckets × 2 specializations × 2 dtypes
    assert len(fake.modules) == 8
    assert k.warmup(M=1) == 4 and len(fake.modules) == 12
    assert k.warmup() == 12 and len(fake.modules) == 12  # each module loads once
    with pytest.raises(loader.ArgumentError, match=r"kernel 'scale': warmup\(\): 'K' is not"):
        k.warmup(K=[1])


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


# --- crafted bundles that verify used to pass but the loader tripped over (issue 16) ------


def crafted(tmp_path: Path, edit: Any = None, payload: Any = None) -> Path:
    """handmade's bundle, its manifest JSON edited by ``edit`` and its payloads (entry ->
    bytes) by ``payload``; every hash is recomputed, as anyone can."""
    m = handmade.manifest()
    j = m.to_json()
    payloads = handmade.payloads(m)
    if edit is not None:
        edit(j)
    if payload is not None:
        payload(payloads)
    path = tmp_path / "crafted.aotc"
    path.write_bytes(encode(j, payloads))
    return path


def kernel_edit(**changes: Any) -> Any:
    return lambda j: j["kernels"][0].update(changes)


def variants_edit(**changes: Any) -> Any:
    def edit(j: dict[str, Any]) -> None:
        for inst in j["kernels"][0]["instances"]:
            for v in inst["variants"]:
                v.update(changes)

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda j: j["targets"][0].update(device_names=[-1]),
            r"targets\[0\]\.device_names\[0\] must be a string, got int -1",
        ),
        (
            variants_edit(abi=["x_ptr", "out_ptr", "M", "N", "nope", "scale"]),
            r"variants\[\"c0-g\"\]\.abi\[4\]: 'nope' is not a parameter",
        ),
        (
            lambda j: j["kernels"][0]["params"][5].update(type="fp16"),
            r"params\[5\]\.type: 'fp16' is not a parameter type this loader can pass",
        ),
        (
            lambda j: j["kernels"][0]["params"][5].update(type="*T2"),
            r"params\[5\]\.type: '\*T2' is not a parameter type",
        ),
        (kernel_edit(bucket_keys=["K"]), r"bucket_keys\[0\]: 'K' is not an integer parameter"),
        (kernel_edit(bucket_keys=["scale"]), "'scale' is not an integer parameter"),
        (variants_edit(scratch_args=2**40), r"scratch_args must be an integer from 0 to 16"),
        (kernel_edit(grid=["__import__('os')", "1", "1"]), r"grid\[0\]: .* is not allowed"),
        (kernel_edit(grid=["cdiv(M, BLOCK) * Q", "1", "1"]), r"the grid reads Q"),
        (kernel_edit(grid=["scale", "1", "1"]), r"the grid reads scale"),
        (kernel_edit(buckets=[["1", "16", "256"]]), r"buckets\[0\]\[0\] must be an integer"),
        (kernel_edit(buckets=[[1, 16, 256], [1]]), "one list of bucket bounds per dimension"),
        (kernel_edit(buckets=[[256, 16, 1]]), "must be a non-empty ascending list"),
        (kernel_edit(buckets=[[1, 16]]), r"choices: has 3 entries for 2 buckets"),
        (
            lambda j: j["kernels"][0]["instances"][0].update(dtypes={"T": "fp8e5"}),
            r"instances\[0\]\.dtypes: must bind each of \['T'\]",
        ),
        (variants_edit(assume={"scale": 16}), "'scale' is not a pointer or integer parameter"),
        (variants_edit(function="k\ud800"), r"function must be a string"),
        (kernel_edit(grid=["M+" * 400 + "M", "1", "1"]), "nested more than 100 levels deep"),
        (kernel_edit(grid=["-" * 2000 + "M", "1", "1"]), "at most 1000 characters"),
        (kernel_edit(grid=["[" + "1+" * 495 + "1]", "1", "1"]), r"'\[1\+1.*' is not allowed"),
        (
            lambda j: j["kernels"][0]["params"].extend(
                {"name": f"p{i}", "type": "i8"} for i in range(1024)
            ),
            "1030 parameters; a kernel takes at most 1024",
        ),
        (variants_edit(abi=["M"] * 7), "lists more names than the kernel has parameters"),
        # pipelines: what capturing a bucket would trip over
        (
            lambda j: j["pipelines"][0]["steps"][0]["args"].__setitem__(2, 5.0),
            r"pipelines\[0\]\.steps\[0\]\.args\[2\]: 5\.0 cannot be M",
        ),
        (
            lambda j: j["pipelines"][0]["steps"][0].update(kernel="nope"),
            "'nope' is not a kernel of the bundle",
        ),
        (
            lambda j: j["pipelines"][0]["tensors"][1].update(
                shape=["64 // (M - 16) * 0 + M", "64"]
            ),
            r"tensors\[1\]\.shape: at \{'M': 16\}: integer division or modulo by zero",
        ),
        (
            lambda j: j["pipelines"][0]["tensors"][1].update(shape=["M", str(2**60)]),
            r"tensors\[1\]\.shape: at \{'M': 1\}: 2305843009213693952 bytes",
        ),
        (
            lambda j: j["pipelines"][1]["tensors"][1].update(shape=["M", "64"]),
            "a weight's shape must be fixed sizes",
        ),
        (
            lambda j: j["pipelines"][0]["tensors"][0].update(shape=["16", "64"]),
            "dimension 'M' is the leading axis of no input",
        ),
    ],
)
def test_what_the_loader_would_trip_over_is_refused_at_open(
    fake: FakeLib, tmp_path: Path, edit: Any, message: str
) -> None:
    path = crafted(tmp_path, edit)
    with pytest.raises(loader.BundleError, match=message):
        loader.open(path)
    with pytest.raises(BadBundle, match=message):  # and `aotc verify` refuses it too
        verify(path)


def test_a_grid_dividing_by_zero_is_an_argument_error_naming_kernel_and_grid(
    fake: FakeLib, tmp_path: Path
) -> None:
    k = loader.open(crafted(tmp_path, kernel_edit(grid=["M // 0", "cdiv(N, M - 5)", "1"])))["scale"]
    for _ in range(2):  # the checked path, then the fast path's retry of it
        with pytest.raises(loader.ArgumentError, match=r"scale\(\): its grid \(M // 0, cdiv"):
            k(*call_args(5))
    assert not fake.launches


def test_a_grid_past_the_cuda_limits_is_an_argument_error(fake: FakeLib, tmp_path: Path) -> None:
    k = loader.open(crafted(tmp_path, kernel_edit(grid=["M * 4096", "N * 70000", "1"])))["scale"]
    with pytest.raises(loader.ArgumentError, match="exceeds the CUDA limits"):
        k(*call_args(5))
    assert not fake.launches


def _cubin_of(function: str, sizes: list[int]) -> Any:
    def edit(payloads: dict[str, bytes]) -> None:
        for name in payloads:
            payloads[name] = cubins.make(function, sizes, b"fake cubin")

    return edit


GENERIC = [8, 8, 4, 4, 4, 4, 8, 8]  # x_ptr, out_ptr, M, N, stride, scale + 2 scratch


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (_cubin_of("scale_kernel", GENERIC[:-1]), r"the cubin takes 7 parameters .* gives 8"),
        (_cubin_of("scale_kernel", [*GENERIC, 8]), r"the cubin takes 9 parameters .* gives 8"),
        (_cubin_of("scale_kernel", [8, 8, 4, 4, 4, 8, 8, 8]), r"of \[8, 8, 4, 4, 4, 8, 8, 8\]"),
        (_cubin_of("other_kernel", GENERIC), "no kernel 'scale_kernel' in the cubin"),
        (lambda p: p.update({n: b"fake cubin" * 9 for n in p}), "not a 64-bit little-endian"),
        (lambda p: p.update({n: cubins.make("scale_kernel", GENERIC)[:70] for n in p}), "cubin"),
    ],
)
def test_abi_is_checked_against_each_cubin_before_the_driver_sees_it(
    fake: FakeLib, tmp_path: Path, payload: Any, message: str
) -> None:
    k = loader.open(crafted(tmp_path, payload=payload))["scale"]
    with pytest.raises(loader.BundleError, match=message) as e:
        k(*call_args(1, stride=3))  # the generic variant: all 6 parameters + 2 scratch
    assert "kernel 'scale', variant c0-g (cubin/sm_90-fp16-0-g)" in str(e.value)
    assert fake.modules == [] and not fake.launches
