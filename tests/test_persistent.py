"""Persistent kernels written the way Triton's tutorials ship them: a ``NUM_SMS:
tl.constexpr`` that strides the tile loop, set by the host from the device. In a recipe,
``fixed = { NUM_SMS = "NUM_SMS" }`` compiles each target's variants with its SM count; the
loader launches a variant with the grid it was compiled for (a loop striding by 132 on a
114-program grid would skip tiles), whatever the GPU it runs on has.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import loader
from aot.build import build
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for
from tests.fakecuda import FakeLib, FakeTensor

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def persistent_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr, NUM_SMS: tl.constexpr):
    num_tiles = tl.cdiv(n, BLOCK)
    for t in tl.range(tl.program_id(0), num_tiles, NUM_SMS):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
"""

RECIPE = """
[bundle]
name = "persistent"
version = "0.1.0"
targets = ["H100-PCIe", "H200"]

[[kernel]]
name = "copy"
source = "k.py:persistent_copy"
grid = "min(NUM_SMS, cdiv(n, BLOCK))"
signature = { x_ptr = "*fp16", y_ptr = "*fp16", n = "i32" }
buckets = { n = [1024, 1048576] }
fixed = { NUM_SMS = "NUM_SMS" }
space = { BLOCK = [1024], num_warps = [4] }
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("persistent")
    (root / "k.py").write_text(KERNEL)
    (root / "r.toml").write_text(RECIPE)
    build(root / "r.toml", root / "p.aotc", env_for(root / "cache"), root)
    return root / "p.aotc"


def test_each_target_is_compiled_with_its_sm_count(bundle: Path) -> None:
    with BundleFile(bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    sms = {
        inst.target: {v.meta["NUM_SMS"] for v in inst.variants.values()}
        for inst in m.kernels[0].instances
    }
    assert sms == {"H100-PCIE": {114}, "H200": {132}}


@pytest.mark.parametrize(
    ("name", "sms", "programs"),
    [
        ("NVIDIA H100 PCIe", 114, 114),  # its own variants: 114 programs
        ("NVIDIA H200", 132, 132),
        # An H200 variant on a GPU reporting fewer SMs (a MIG slice, say) still gets the
        # grid its loop strides by: correct, if oversubscribed.
        ("NVIDIA H200", 60, 132),
    ],
)
def test_the_grid_follows_the_compiled_sm_count(
    fake: FakeLib, bundle: Path, name: str, sms: int, programs: int
) -> None:
    fake.name, fake.sms = name, sms
    copy = loader.open(bundle)["copy"]
    n = 1 << 20
    copy(FakeTensor(0x10000), FakeTensor(0x20000), n)
    assert fake.launches[-1].grid == (programs, 1, 1)
    copy(FakeTensor(0x10000), FakeTensor(0x20000), 2048)  # two tiles: two programs
    assert fake.launches[-1].grid == (2, 1, 1)


def test_a_register_cap_is_searched_like_a_launch_option(tmp_path: Path) -> None:
    # space.maxnreg: Triton's register cap per thread (a tl.range warp-specialised loop's
    # companion on Hopper); each listed cap is a config of its own.
    (tmp_path / "k.py").write_text(KERNEL)
    recipe = RECIPE.replace("BLOCK = [1024], num_warps = [4]", "BLOCK = [4096], num_warps = [4]")
    regs = {}
    for cap in ("", ", maxnreg = [24]"):
        (tmp_path / "r.toml").write_text(recipe.replace("num_warps = [4]", f"num_warps = [4]{cap}"))
        out = tmp_path / f"p{len(cap)}.aotc"
        build(tmp_path / "r.toml", out, env_for(tmp_path / "cache"), tmp_path)
        with BundleFile(out) as bf:
            inst = Manifest.from_json(bf.manifest).kernels[0].instances[0]
        regs[cap] = {v.regs for v in inst.variants.values()}
    assert regs[", maxnreg = [24]"] == {24} and min(regs[""]) > 24
