"""The loader's ABI check on cubins that ptxas really wrote: a bundle built from a recipe
loads every variant through it, and the same bundle with one variant's ABI changed is
refused before the driver sees the cubin."""

from __future__ import annotations

from pathlib import Path

import pytest

import loader
from aot.build import build
from loader import cubin
from loader.format import BundleFile, encode
from tests.fakecuda import FakeLib

from .conftest import env_for


@pytest.fixture
def fake(fake: FakeLib) -> FakeLib:
    """The conftest's fake driver, reporting an H100."""
    fake.name = "NVIDIA H100 80GB HBM3"
    return fake


@pytest.fixture
def small(recipe_dir: Path, tmp_path: Path, compile_cache: Path) -> Path:
    out = tmp_path / "small.aotc"
    build(recipe_dir / "small.toml", out, env_for(compile_cache), tmp_path)
    return out


def test_real_cubins_declare_the_abi_the_manifest_records(fake: FakeLib, small: Path) -> None:
    with BundleFile(small) as bf:
        for inst in bf.spec.kernels[0].instances:
            for v in inst.variants.values():
                sizes = cubin.param_sizes(bf.read_entry(v.entry), v.function)
                # x_ptr, out_ptr, n (unless n == 1 is assumed), alpha, 2 scratch pointers
                want = (8, 8, 4, 4, 8, 8) if "n" in v.abi else (8, 8, 4, 8, 8)
                assert sizes == want, (v.id, v.abi)
    bundle = loader.open(small)
    assert bundle.warmup() == len(fake.modules) > 0


def test_an_abi_that_disagrees_with_its_cubin_is_refused(fake: FakeLib, small: Path) -> None:
    with BundleFile(small) as bf:
        manifest = {k: v for k, v in bf.manifest.items() if k not in ("entries", "payload_size")}
        payloads = {n: bf.read_entry(n) for n in bf.entries}
    for inst in manifest["kernels"][0]["instances"]:
        for v in inst["variants"]:
            v["abi"] = v["abi"][:-1]  # alpha dropped: the loader would pack 5 of the 6
    small.write_bytes(encode(manifest, payloads))
    with pytest.raises(loader.BundleError, match=r"the cubin takes 6 parameters .* gives 5"):
        loader.open(small).warmup()
    assert fake.modules == []


def test_machine_code_is_a_cubins_instructions_and_differs_between_configs(small: Path) -> None:
    """``cubin.machine_code``: the .text sections (what gallery_bench compares with the
    JIT's cubins); present in every variant, and different for different configs."""
    with BundleFile(small) as bf:
        variants = [v for inst in bf.spec.kernels[0].instances for v in inst.variants.values()]
        codes = {v.id: cubin.machine_code(bf.read_entry(v.entry)) for v in variants}
        first = bf.read_entry(variants[0].entry)
    assert all(len(c) > 0 for c in codes.values())
    assert len(set(codes.values())) > 1
    assert 0 < len(codes[variants[0].id]) < len(first)  # the code, not the whole ELF file
    with pytest.raises(cubin.CubinError):
        cubin.machine_code(b"not an ELF file")
