"""Real cross-compilation with Triton on a CPU-only machine: arch, ABI, cache, failures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aot import cubin
from aot.build import build
from aot.errors import BuildError
from aot.plan import make_plan
from aot.recipe import load
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for


def cuobjdump() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def test_cubins_are_built_for_their_target_arch(
    recipe_dir: Path, tmp_path: Path, compile_cache: Path
) -> None:
    out = tmp_path / "small.aotc"
    build(recipe_dir / "small.toml", out, env_for(compile_cache), tmp_path)
    with BundleFile(out) as bf:
        m = Manifest.from_json(bf.manifest)
        arch_of = {t.name: t.arch for t in m.targets}
        checked = 0
        for inst in m.kernels[0].instances:
            for v in inst.variants.values():
                data = bf.read_entry(v.entry)
                f = tmp_path / f"{v.id}.cubin"
                f.write_bytes(data)
                listing = subprocess.run(
                    [cuobjdump(), "-lelf", f], capture_output=True, text=True, check=True
                ).stdout
                want = arch_of[inst.target]  # sm_80, or sm_90 for H100 (Triton emits sm_90a)
                assert want in listing, listing
                assert cubin.inspect(data).sm == int(want[3:])
                res = subprocess.run(
                    [cuobjdump(), "-res-usage", f], capture_output=True, text=True, check=True
                ).stdout
                assert f"REG:{v.regs} " in res, (v.regs, res)
                checked += 1
    assert checked == 8  # 2 targets × 2 dtypes × 1 config (both buckets) × 2 specializations


def test_rebuild_compiles_nothing_and_is_byte_identical(recipe_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = build(recipe_dir / "small.toml", tmp_path / "a.aotc", env_for(cache), tmp_path)
    again = build(recipe_dir / "small.toml", tmp_path / "b.aotc", env_for(cache, jobs=1), tmp_path)
    assert first.compiled == 8 and first.cached == 0
    assert again.compiled == 0 and again.cached == 8
    assert (tmp_path / "a.aotc").read_bytes() == (tmp_path / "b.aotc").read_bytes()
    # a cold build in another cache gives the same bytes too
    cold = build(recipe_dir / "small.toml", tmp_path / "c.aotc", env_for(tmp_path / "c2"), tmp_path)
    assert cold.sha256 == first.sha256


def test_source_change_invalidates_cache(recipe_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    build(recipe_dir / "small.toml", tmp_path / "a.aotc", env_for(cache), tmp_path)
    src = recipe_dir / "kernels" / "small.py"
    # change only the helper jit function the kernel calls
    src.write_text(src.read_text().replace("return x * x", "return x * x + 0"))
    # a fresh process would re-import; here we drop the module cache by hand
    from aot import kernelfile

    kernelfile._modules.clear()
    r = build(recipe_dir / "small.toml", tmp_path / "b.aotc", env_for(cache), tmp_path)
    assert r.compiled == 8


def test_damaged_cache_entry_is_a_miss(recipe_dir: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    build(recipe_dir / "small.toml", tmp_path / "a.aotc", env_for(cache), tmp_path)
    victim = sorted(cache.rglob("*.cubin"))[0]
    victim.write_bytes(b"garbage")
    r = build(recipe_dir / "small.toml", tmp_path / "b.aotc", env_for(cache), tmp_path)
    assert r.compiled == 1
    assert (tmp_path / "a.aotc").read_bytes() == (tmp_path / "b.aotc").read_bytes()


BROKEN = """
format = 1
[bundle]
name = "broken"
version = "1"
targets = ["sm_90"]

[[kernel]]
name = "broken"
source = "kernels/small.py:broken_kernel"
grid = "1"
signature = {{ x_ptr = "*fp32", n = "i32" }}
buckets = {{ n = [16, 4096] }}
[kernel.space]
BLOCK = {blocks}
[kernel.default]
BLOCK = {default}
"""


def test_failing_variant_is_recorded_and_build_goes_on(recipe_dir: Path, tmp_path: Path) -> None:
    recipe = recipe_dir / "broken.toml"
    recipe.write_text(BROKEN.format(blocks="[48, 64]", default=48))
    r = build(recipe, tmp_path / "b.aotc", env_for(tmp_path / "cache"), tmp_path)
    assert r.failed == 2  # BLOCK=48: both the specialized and the generic variant
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    failed = m.build["failed"]
    assert {f["config"].split()[0] for f in failed} == {"BLOCK=48"}
    assert all("power of 2" in f["reason"] for f in failed), failed
    (inst,) = m.kernels[0].instances
    assert {v.meta["BLOCK"] for v in inst.variants.values()} == {64}
    assert "BLOCK=48" in r.report.read_text()


def test_build_with_nothing_compiling_fails_and_writes_no_bundle(
    recipe_dir: Path, tmp_path: Path
) -> None:
    recipe = recipe_dir / "broken.toml"
    recipe.write_text(BROKEN.format(blocks="[48, 96]", default=48))
    out = tmp_path / "out" / "b.aotc"
    with pytest.raises(BuildError, match=r"no candidate config compiled and fits.*power of 2"):
        build(recipe, out, env_for(tmp_path / "cache"), tmp_path)
    assert not out.exists()
    assert not any((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


def test_equal_one_specialization_drops_the_parameter(recipe_dir: Path, tmp_path: Path) -> None:
    text = (
        (recipe_dir / "small.toml")
        .read_text()
        .replace(
            "[kernel.space]", 'specializations = [{ "*" = 16, n = 0 }, { n = 1 }]\n[kernel.space]'
        )
    )
    (recipe_dir / "small.toml").write_text(text)
    plan = make_plan(load(recipe_dir / "small.toml"))
    assert [s.label for s in plan.instances[0].specs] == ["out_ptr%16 x_ptr%16", "n==1", "generic"]
    r = build(recipe_dir / "small.toml", tmp_path / "s.aotc", env_for(tmp_path / "c"), tmp_path)
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    abis = {
        tuple(sorted(v.assume.items())): v.abi for v in m.kernels[0].instances[0].variants.values()
    }
    assert abis[(("n", 1),)] == ("x_ptr", "out_ptr", "alpha")
    assert abis[()] == ("x_ptr", "out_ptr", "n", "alpha")


def test_same_sources_from_another_folder_give_the_same_bytes(tmp_path: Path) -> None:
    import shutil

    from tests.conftest import DATA

    outs = []
    for name in ("checkout-a", "somewhere/else/b"):
        root = tmp_path / name
        shutil.copytree(DATA, root)
        r = build(root / "small.toml", tmp_path / f"{name.replace('/', '_')}.aotc",
                  env_for(tmp_path / f"cache-{len(outs)}"), tmp_path)  # fmt: skip
        outs.append(r.bundle.read_bytes())
    assert outs[0] == outs[1]


def test_load_function_imports_a_recipe_reference_once(tmp_path: Path) -> None:
    from aot.kernelfile import load_function

    (tmp_path / "fns.py").write_text("def twice(x):\n    return 2 * x\n")
    ref = f"{tmp_path / 'fns.py'}:twice"
    assert load_function(ref)(21) == 42
    assert load_function(ref) is load_function(ref)  # the file ran once
    with pytest.raises(AttributeError):
        load_function(f"{tmp_path / 'fns.py'}:missing")
