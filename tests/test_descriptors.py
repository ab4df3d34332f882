"""TMA tensor descriptors and global scratch (issue 21), on the CPU: real Triton compiles of
recipes/hopper's kernels for sm_90, then the loader on the fake driver — the ABI it packs
(tensor map by value, then shape and strides), what it asks cuTensorMapEncodeTiled, the
cache of encoded maps, TMA's alignment rules refused with the argument named, and the
per-stream scratch pool. tests/gpu/test_hopper_gpu.py runs the same kernels on an H200.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

import loader
from aot.build import build
from aot.errors import RecipeError
from aot.recipe import load
from loader.errors import ArgumentError
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for
from tests.fakecuda import FakeLib

ROOT = Path(__file__).resolve().parents[1]
HOPPER = ROOT / "recipes" / "hopper"

RECIPE = """
format = 1
[bundle]
name = "tma"
version = "0.1.0"
targets = ["sm_90"]

[[kernel]]
name = "matmul_tma"
source = "hopper/tma_matmul.py:matmul_tma_persistent"
grid = "min(NUM_SMS, cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N))"
dtypes = { T = ["fp16"] }
buckets = { M = [64, 4096] }
sizes = { N = 4096, K = 4096 }
fixed = { GROUP_M = 8, WARP_SPECIALIZE = false, BLOCK_K = 64 }
specializations = [{ "*" = 16, M = 0 }]
signature = { a_desc = "*T", b_desc = "*T", c_desc = "*T", M = "i32", N = "i32", K = "i32" }
[kernel.descriptors]
a_desc = ["BLOCK_M", "BLOCK_K"]
b_desc = ["BLOCK_K", "BLOCK_N"]
c_desc = ["BLOCK_M", "BLOCK_N"]
[kernel.space]
BLOCK_M = [64]
BLOCK_N = [128]
num_warps = [4]
num_stages = [3]

[[kernel]]
name = "matmul_tma_ws"
source = "hopper/tma_matmul.py:matmul_tma_persistent"
grid = "min(NUM_SMS, cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N))"
dtypes = { T = ["fp16"] }
sizes = { M = 256, N = 4096, K = 4096 }
fixed = { GROUP_M = 8, WARP_SPECIALIZE = true, BLOCK_K = 64, BLOCK_M = 64, BLOCK_N = 128 }
specializations = []
signature = { a_desc = "*T", b_desc = "*T", c_desc = "*T", M = "i32", N = "i32", K = "i32" }
[kernel.descriptors]
a_desc = ["BLOCK_M", "BLOCK_K"]
b_desc = ["BLOCK_K", "BLOCK_N"]
c_desc = ["BLOCK_M", "BLOCK_N"]
[kernel.space]
num_warps = [4]
num_stages = [3]

[[kernel]]
name = "matmul_tma_device"
source = "hopper/tma_matmul.py:matmul_tma_device"
grid = "min(NUM_SMS, cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N))"
dtypes = { T = ["fp16"] }
buckets = { M = [64, 4096] }
sizes = { N = 4096, K = 4096 }
fixed = { GROUP_M = 8, WARP_SPECIALIZE = false, BLOCK_K = 64 }
specializations = []
[kernel.signature]
a_ptr = "*T"
b_ptr = "*T"
c_ptr = "*T"
M = "i32"
N = "i32"
K = "i32"
stride_am = "i32"
stride_bk = "i32"
stride_cm = "i32"
[kernel.space]
BLOCK_M = [64]
BLOCK_N = [128]
num_warps = [4]
num_stages = [3]
"""


class Tensor:
    """Duck-typed like a CUDA torch tensor, with shape and strides (in elements)."""

    def __init__(self, addr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None = None,
                 dtype: str = "torch.float16"):  # fmt: skip
        self.addr, self.shape, self.dtype, self.is_cuda = addr, shape, dtype, True
        self._strides = strides or tuple(_prod(shape[i + 1 :]) for i in range(len(shape)))

    def data_ptr(self) -> int:
        return self.addr

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def numel(self) -> int:
        return _prod(self.shape)


def _prod(xs: tuple[int, ...]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tma")
    shutil.copytree(HOPPER, root / "hopper")
    (root / "tma.toml").write_text(RECIPE)
    out = root / "tma.aotc"
    build(root / "tma.toml", out, env_for(root / "cache"), root)
    return out


def test_the_manifest_records_each_variants_tensor_maps_and_scratch(bundle: Path) -> None:
    with BundleFile(bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    host, _, device = m.kernels
    assert host.descriptors == ("a_desc", "b_desc", "c_desc") and device.descriptors == ()
    for inst in host.instances:
        for v in inst.variants.values():
            assert [d.param for d in v.descriptors] == ["a_desc", "b_desc", "c_desc"]
            assert all(d.tma and d.elem_size == 2 and d.elem_type == 6 for d in v.descriptors)
            # The box is the block, or narrower where the copy is split at the swizzle span
            # (128 bytes: 64 fp16 elements innermost).
            a, b, c = (d.block for d in v.descriptors)
            assert a == (64, 64) and b[0] == 64 and c[0] == 64 and b[1] <= 128 >= c[1]
            assert v.global_scratch == 0
            assert not set(v.assume) & {"a_desc", "b_desc", "c_desc"}
    for inst in device.instances:
        for v in inst.variants.values():
            assert v.descriptors == () and v.global_scratch > 0 and v.global_scratch_align > 0


def _matmul_args(m: int, n: int = 4096, k: int = 4096) -> list[Any]:
    a = Tensor(0x100000, (m, k))
    b = Tensor(0x200000, (k, n))
    c = Tensor(0x300000, (m, n))
    return [a, b, c, m, n, k]


def test_a_call_passes_each_descriptor_as_triton_does(fake: FakeLib, bundle: Path) -> None:
    b = loader.open(bundle)
    kernel = b["matmul_tma"]
    variant = kernel.variant_for(*_matmul_args(100))
    kernel(*_matmul_args(100))
    boxes = [tuple(reversed(d.block)) for d in variant.descriptors]
    assert fake.tensor_maps == [
        # (CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank, address, dims and box innermost first,
        #  byte strides of the outer dims, element strides, no interleave, the variant's
        #  swizzle, L2 promotion 128B, no NaN fill)
        (6, 2, 0x100000, (4096, 100), (8192,), boxes[0], (1, 1), 0, d.swizzle, 2, 0)
        if d.param == "a_desc" else
        (6, 2, 0x200000, (4096, 4096), (8192,), boxes[1], (1, 1), 0, d.swizzle, 2, 0)
        if d.param == "b_desc" else
        (6, 2, 0x300000, (4096, 100), (8192,), boxes[2], (1, 1), 0, d.swizzle, 2, 0)
        for d in variant.descriptors
    ]  # fmt: skip
    launch = fake.launches[-1]
    assert launch.grid == (min(132, 2 * 32), 1, 1)
    # The cubin's own parameter list was checked against this layout when it was loaded;
    # read it back: per descriptor, the 128-byte map, its shape (two i32: one word read)
    # and strides (two i64), then M, N, K and the two scratch pointers, null.
    words = launch.params
    slot = 0
    for addr, rows in ((0x100000, 100), (0x200000, 4096), (0x300000, 100)):
        assert words[slot] == addr  # the fake map's first word: the address it describes
        assert words[slot + 1] == struct.unpack("<q", struct.pack("<ii", rows, 4096))[0]
        assert words[slot + 3 : slot + 5] == [4096, 1] or words[slot + 3] == 4096
        slot += 5
    assert [w & 0xFFFFFFFF for w in words[-5:-2]] == [100, 4096, 4096]  # i32 slots
    assert words[-2:] == [0, 0]


def test_encoded_maps_are_cached_per_tensor(fake: FakeLib, bundle: Path) -> None:
    kernel = loader.open(bundle)["matmul_tma"]
    args = _matmul_args(64)
    for _ in range(5):
        kernel(*args)
    assert len(fake.tensor_maps) == 3 and len(fake.launches) == 5
    other = _matmul_args(64)
    other[2] = Tensor(0x400000, (64, 4096))  # a new output buffer: only its map is encoded
    kernel(*other)
    assert len(fake.tensor_maps) == 4 and fake.tensor_maps[-1][2] == 0x400000
    new_c = list(fake.launches[-1].params)
    # Back and forth between the two outputs: each call passes its own map, none is
    # encoded again (the calls' descriptors are cached together, and one by one).
    for call, params in [(args, None), (other, new_c), (args, None)]:
        kernel(*call)
        if params is not None:
            assert fake.launches[-1].params == params
    assert fake.launches[-1].params == fake.launches[4].params
    assert fake.launches[-1].params != new_c
    assert len(fake.tensor_maps) == 4


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: Tensor(0x100008, a.shape), "not 16-byte aligned"),
        (lambda a: Tensor(a.addr, (100, 4090), (4090, 1)), "not a multiple of 16 bytes"),
        (lambda a: Tensor(a.addr, a.shape, (1, 100)), "innermost dimension is strided"),
        (lambda a: Tensor(a.addr, (100, 4096, 1)), "rank 3"),
        (lambda a: a.addr, "pass the tensor itself"),
    ],
)
def test_a_tensor_tma_cannot_read_is_refused_naming_it(
    fake: FakeLib, bundle: Path, change: Any, message: str
) -> None:
    kernel = loader.open(bundle)["matmul_tma"]
    args = _matmul_args(100)
    args[0] = change(args[0])
    with pytest.raises(ArgumentError, match=message) as err:
        kernel(*args)
    assert "'a_desc'" in str(err.value)
    assert fake.launches == []


def test_the_fast_path_encodes_as_the_checked_path(fake: FakeLib, bundle: Path) -> None:
    kernel = loader.open(bundle)["matmul_tma"]
    kernel(*_matmul_args(100))  # checked: learns the signature
    first = list(fake.launches[-1].params)
    fake.tensor_maps.clear()
    kernel(*_matmul_args(100))  # the fast path: same values, the maps from the cache
    assert fake.launches[-1].params == first and fake.tensor_maps == []
    bad = _matmul_args(100)
    bad[1] = Tensor(0x200004, (4096, 4096))
    with pytest.raises(ArgumentError, match=r"'b_desc'.*16-byte"):
        kernel(*bad)


def test_global_scratch_comes_from_one_buffer_per_stream(fake: FakeLib, bundle: Path) -> None:
    fake.sms = 1024  # a GPU this wide runs enough programs to outgrow the first buffer
    kernel = loader.open(bundle)["matmul_tma_device"]

    def call(m: int, stream: int = 0) -> int:
        a, b = Tensor(0x100000, (m, 4096)), Tensor(0x200000, (4096, 4096))
        c = Tensor(0x300000, (m, 4096))
        kernel(a, b, c, m, 4096, 4096, 4096, 4096, 4096, stream=stream)
        return int(fake.launches[-1].params[-2])  # global scratch: the last but one

    with BundleFile(bundle) as bf:
        per_program = Manifest.from_json(bf.manifest).kernels[2].instances[0].variants
    size = next(iter(per_program.values())).global_scratch
    small = call(64)  # 32 programs
    assert small and len(fake.allocations) == 1 and fake.allocations[0] >= 32 * size
    assert call(64) == small and call(100) == small  # steady state: no allocation
    assert len(fake.allocations) == 1
    big = call(4096)  # 1024 programs: the buffer grows once, to a power of two
    assert len(fake.allocations) == 2 and fake.allocations[1] >= 1024 * size > 1 << 16
    assert call(4096) == big and call(64) == big and len(fake.allocations) == 2
    other = call(64, stream=0x777)  # another stream: a buffer of its own
    assert other != big and len(fake.allocations) == 3


def test_descriptors_in_a_recipe_are_checked(tmp_path: Path) -> None:
    shutil.copytree(HOPPER, tmp_path / "hopper")

    def refused(old: str, new: str) -> str:
        (tmp_path / "r.toml").write_text(RECIPE.replace(old, new, 1))
        with pytest.raises(RecipeError) as err:
            load(tmp_path / "r.toml")
        return str(err.value)

    msg = refused('a_desc = ["BLOCK_M", "BLOCK_K"]', 'M = ["BLOCK_M", "BLOCK_K"]')
    assert "descriptors.M" in msg and "not a pointer argument" in msg
    msg = refused('a_desc = ["BLOCK_M", "BLOCK_K"]', 'a_desc = ["BLOCK_M", "BLOCK_Q"]')
    assert "descriptors.a_desc[1]" in msg and "BLOCK_Q" in msg
    msg = refused('a_desc = ["BLOCK_M", "BLOCK_K"]', "a_desc = []")
    assert "descriptors.a_desc" in msg and "block shape" in msg


PIPELINE = """
[[pipeline]]
name = "mm"
buckets = { M = [64, 4096] }
[pipeline.tensors]
a = { role = "input", dtype = "fp16", shape = ["M", 4096] }
b = { role = "weight", dtype = "fp16", shape = [4096, 4096] }
c = { role = "output", dtype = "fp16", shape = ["M", 4096] }
[[pipeline.step]]
kernel = "matmul_tma"
args = { a_desc = "a", b_desc = "b", c_desc = "c" }
[[pipeline.step]]
kernel = "matmul_tma_device"
args = { a_ptr = "a", b_ptr = "b", c_ptr = "c" }
"""
ACCESS = """shapes = { a_desc = ["M", "K"], b_desc = ["K", "N"], c_desc = ["M", "N"] }
writes = ["c_desc"]
"""
DEVICE_ACCESS = """shapes = { a_ptr = ["M", "K"], b_ptr = ["K", "N"], c_ptr = ["M", "N"] }
strides = { a_ptr = ["stride_am", 1], b_ptr = ["stride_bk", 1], c_ptr = ["stride_cm", 1] }
writes = ["c_ptr"]
"""


def test_a_pipeline_graph_passes_descriptors_and_scratch(fake: FakeLib, tmp_path: Path) -> None:
    shutil.copytree(HOPPER, tmp_path / "hopper")
    recipe = RECIPE.replace(
        "[kernel.descriptors]\na_desc", ACCESS + "[kernel.descriptors]\na_desc", 1
    )
    recipe = recipe.replace(
        "specializations = []\n[kernel.signature]\na_ptr",
        "specializations = []\n" + DEVICE_ACCESS + "[kernel.signature]\na_ptr",
    )
    (tmp_path / "p.toml").write_text(recipe + PIPELINE)
    build(tmp_path / "p.toml", tmp_path / "p.aotc", env_for(tmp_path / "cache"), tmp_path)
    b = loader.open(tmp_path / "p.aotc")
    weight = Tensor(0x200000, (4096, 4096))
    mm = b.pipeline("mm", b=weight)
    # A call at the bucket's size binds the caller's tensors: the node's tensor maps are
    # encoded again for their addresses; the scratch pointer is the captured one.
    x, out = Tensor(0x5000000, (64, 4096)), Tensor(0x6000000, (64, 4096))
    x.is_contiguous = lambda: True  # type: ignore[attr-defined]
    out.is_contiguous = lambda: True  # type: ignore[attr-defined]
    mm(x, out)
    captured = [launch for launch in fake.graphs[next(iter(fake.graphs))]]
    assert len(captured) == 2
    scratch = captured[1].params[-2]
    assert scratch and len(fake.allocations) >= 2  # the arena, the reserved scratch
    addresses = {call[2] for call in fake.tensor_maps}
    assert {0x200000, 0x5000000, 0x6000000} <= addresses  # weight, then the bound tensors
    replayed = [launch for launch in fake.launches if launch.replayed]
    assert replayed and replayed[-1].params[-2] == scratch


def test_a_warp_specialised_variant_launches_the_warps_triton_gave_it(
    fake: FakeLib, bundle: Path
) -> None:
    # Asked for 4 warps, Triton 3.6's warp specialisation on sm_90 adds a producer warp
    # group and a second consumer: the kernel needs 12 warps, and launching it with the
    # config's 4 would run a third of its threads.
    kernel = loader.open(bundle)["matmul_tma_ws"]
    args = _matmul_args(256)
    assert kernel.variant_for(*args).num_warps == 12
    kernel(*args)
    assert fake.launches[-1].block == 12 * 32


def test_an_empty_call_launches_nothing_and_encodes_nothing(fake: FakeLib, bundle: Path) -> None:
    kernel = loader.open(bundle)["matmul_tma"]
    a, b, c = (
        Tensor(0x100000, (0, 4096)),
        Tensor(0x200000, (4096, 4096)),
        Tensor(0x300000, (0, 4096)),
    )
    kernel(a, b, c, 0, 4096, 4096)  # as a plain kernel with an empty grid: no launch, no error
    assert fake.launches == [] and fake.tensor_maps == []


def test_on_a_gpu_without_tma_a_descriptor_is_a_pointer_shape_and_strides(
    fake: FakeLib, tmp_path: Path
) -> None:
    # On sm_80 Triton lowers a host descriptor to plain loads: it takes the base pointer,
    # the shape and strides (i64), the padding flag, then the shape (i32) and strides
    # (i64) again, as Triton's launcher passes them; nothing is encoded.
    shutil.copytree(HOPPER, tmp_path / "hopper")
    (tmp_path / "r.toml").write_text(RECIPE.replace('targets = ["sm_90"]', 'targets = ["sm_80"]'))
    build(tmp_path / "r.toml", tmp_path / "a.aotc", env_for(tmp_path / "cache"), tmp_path)
    fake.name, fake.cc, fake.sms = "NVIDIA A100-SXM4-80GB", (8, 0), 108
    kernel = loader.open(tmp_path / "a.aotc")["matmul_tma"]
    assert not any(d.tma for d in kernel.variant_for(*_matmul_args(100)).descriptors)
    kernel(*_matmul_args(100))
    assert fake.tensor_maps == []
    words = fake.launches[-1].params
    # a_desc: pointer, 100, 4096 (i64), 4096, 1 (i64), padding (i1), 100/4096 (i32), ...
    assert words[:5] == [0x100000, 100, 4096, 4096, 1] and words[5] & 0xFF == 0
    assert words[6] & 0xFFFFFFFF == 100 and words[7] & 0xFFFFFFFF == 4096
    assert words[8:10] == [4096, 1]
    with pytest.raises(ArgumentError, match="rank 3"):
        kernel(Tensor(0x100000, (100, 4096, 1)), *_matmul_args(100)[1:])


def test_the_hopper_recipe_builds_without_a_gpu(tmp_path: Path) -> None:
    out = tmp_path / "hopper.aotc"
    build(ROOT / "recipes" / "hopper.toml", out, env_for(tmp_path / "cache"), tmp_path)
    with BundleFile(out) as bf:
        m = Manifest.from_json(bf.manifest)
    by_name = {k.name: k for k in m.kernels}
    attention = {f"attention_d{d}{c}{g}" for d in (64, 128) for c in ("", "_causal")
                 for g in ("", "_gluon")}  # fmt: skip
    persistent = {f"attention_d{d}{c}_gluon_persistent" for d in (64, 128)
                  for c in ("", "_causal")}  # fmt: skip
    assert set(by_name) == {"matmul_tma", "matmul_tma_splitk", "matmul_tma_device", "matmul_ws",
                            *attention, *persistent,
                            "attention_d64_gluon_3wg"}  # fmt: skip
    for k in by_name.values():
        for inst in k.instances:
            for v in inst.variants.values():
                assert len(v.descriptors) == len(k.descriptors)
                assert all(d.tma for d in v.descriptors)
                assert (v.global_scratch > 0) == (k.name == "matmul_tma_device")


GLUON_RECIPE = """
format = 1
[bundle]
name = "gluon"
version = "0.1.0"
targets = ["sm_90"]

[[kernel]]
name = "attention"
source = "hopper/attention_gluon.py:attn_fwd_ws2"
grid = ["cdiv(N_CTX, BLOCK_M)", "Z * H"]
dtypes = { T = ["fp16"] }
buckets = { N_CTX = [1024] }
sizes = { Z = 1, H = 2 }
fixed = { HEAD_DIM = 128, CAUSAL = false, BLOCK_M = 128, BLOCK_N = 128, STAGES = 2 }
specializations = []
[kernel.signature]
q_desc = "*T"
k_desc = "*T"
v_desc = "*T"
o_desc = "*T"
sm_scale = "fp32"
Z = "i32"
H = "i32"
N_CTX = "i32"
[kernel.descriptors]
q_desc = ["BLOCK_M // 2", "HEAD_DIM"]
k_desc = ["BLOCK_N", "HEAD_DIM"]
v_desc = ["BLOCK_N", "HEAD_DIM"]
o_desc = ["BLOCK_M // 2", "HEAD_DIM"]
[kernel.space]
num_warps = [4]
"""


def test_a_gluon_kernel_builds_and_launches_with_its_layouts(fake: FakeLib, tmp_path: Path) -> None:
    # recipes/hopper/attention_gluon.py is a Gluon kernel: compiled with GluonASTSource,
    # its descriptor types naming the default NVMMA layout of their blocks (128-byte
    # swizzle for 128 fp16 columns, copied as two 64-column boxes), in three partitions
    # (4 + 4 computing warps and a load warp: 12 warps launched).
    shutil.copytree(HOPPER, tmp_path / "hopper")
    (tmp_path / "g.toml").write_text(GLUON_RECIPE)
    build(tmp_path / "g.toml", tmp_path / "g.aotc", env_for(tmp_path / "cache"), tmp_path)
    kernel = loader.open(tmp_path / "g.aotc")["attention"]
    rows = 2 * 1024
    q, k, v, o = (Tensor(0x1000000 * (i + 1), (rows, 128)) for i in range(4))
    args = [q, k, v, o, 128**-0.5, 1, 2, 1024]
    variant = kernel.variant_for(*args)
    assert variant.num_warps == 12
    assert [d.block for d in variant.descriptors] == [(64, 64), (128, 64), (128, 64), (64, 64)]
    assert all(d.tma and d.swizzle == 3 and d.elem_size == 2 for d in variant.descriptors)
    kernel(*args)
    launch = fake.launches[-1]
    assert launch.grid == (8, 2, 1) and launch.block == 12 * 32
    assert [m[2] for m in fake.tensor_maps] == [0x1000000, 0x2000000, 0x3000000, 0x4000000]


def test_three_warp_group_attention_builds_and_launches(fake: FakeLib, tmp_path: Path) -> None:
    # recipes/hopper/attention_gluon_3wg.py: three computing partitions of 4 warps and a load
    # warp (16 warps launched, the last group padded), Q and O described in blocks of
    # BLOCK_M // 3 = 64 rows. The grid is persistent over 192-row tiles, the last of each
    # head reaching past N_CTX; N_CTX need only be a multiple of 64, and is refused
    # otherwise.
    shutil.copytree(HOPPER, tmp_path / "hopper")
    recipe = GLUON_RECIPE.replace(
        "attention_gluon.py:attn_fwd_ws2", "attention_gluon_3wg.py:attn_fwd_ws3p"
    )
    recipe = recipe.replace('grid = ["cdiv(N_CTX, BLOCK_M)", "Z * H"]',
                            'grid = "min(NUM_SMS, cdiv(N_CTX, BLOCK_M) * Z * H)"\n'
                            'constraints = ["N_CTX % (BLOCK_M // 3) == 0"]')  # fmt: skip
    recipe = recipe.replace(
        "HEAD_DIM = 128, CAUSAL = false, BLOCK_M = 128, BLOCK_N = 128, STAGES = 2",
        "HEAD_DIM = 64, REGS = 160, BLOCK_M = 192, BLOCK_N = 64, STAGES = 8",
    )
    recipe = recipe.replace('"BLOCK_M // 2"', '"BLOCK_M // 3"')
    (tmp_path / "g.toml").write_text(recipe)
    build(tmp_path / "g.toml", tmp_path / "g.aotc", env_for(tmp_path / "cache"), tmp_path)
    kernel = loader.open(tmp_path / "g.aotc")["attention"]
    q, k, v, o = (Tensor(0x1000000 * (i + 1), (2 * 1024, 64)) for i in range(4))
    variant = kernel.variant_for(q, k, v, o, 0.125, 1, 2, 1024)
    assert variant.num_warps == 16
    assert [d.block for d in variant.descriptors] == [(64, 64)] * 4
    kernel(q, k, v, o, 0.125, 1, 2, 1024)
    launch = fake.launches[-1]
    assert launch.grid == (12, 1, 1) and launch.block == 16 * 32  # 6 tiles a head, 2 heads
    q, k, v, o = (Tensor(0x1000000 * (i + 1), (2 * 1000, 64)) for i in range(4))
    with pytest.raises(ArgumentError, match="N_CTX"):
        kernel(q, k, v, o, 0.125, 1, 2, 1000)
