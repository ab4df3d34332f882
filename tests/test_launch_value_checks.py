"""A constraint may read a variant's launch options (``num_warps``, ``num_stages``) beside
the call's values, as a library's host rule for its warps reads the row width (unsloth's
and Liger-Kernel's ``calculate_settings``). Such a bundle used to build and then fail to
open ("reads num_warps: neither an integer parameter, a call value nor a meta-parameter").
A constraint may also read a derived meta-parameter (``BLOCK_SIZE``), which used to stop
the plan with "no value for BLOCK_SIZE".
"""

from __future__ import annotations

from pathlib import Path

import pytest

import loader
from aot.build import build
from loader.errors import ArgumentError
from tests.conftest import env_for
from tests.fakecuda import FakeLib
from tests.test_descriptors import Tensor

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def row_kernel(X, n_cols, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(X + tl.program_id(0) * n_cols + offs, mask=offs < n_cols)
    tl.store(X + tl.program_id(0) * n_cols + offs, x * 2, mask=offs < n_cols)
"""

RECIPE = """
format = 1
[bundle]
name = "rows"
version = "0.1.0"
targets = ["sm_90"]

[[kernel]]
name = "rows"
source = "rows.py:row_kernel"
signature = { X = "*fp16", n_cols = "i32" }
grid = "n_rows"
call = { n_rows = "shape(X, 0)" }
buckets = { n_rows = [1, 1024] }
sizes = { n_cols = [4096, 8192] }
derived = { BLOCK_SIZE = "next_power_of_2(n_cols)" }
space = { num_warps = [8, 16], num_stages = [1, 2] }
constraints = ["num_warps == min(16, max(4, next_power_of_2(n_cols) // 512))", "num_stages == 1"]
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rows")
    (root / "rows.py").write_text(KERNEL)
    (root / "rows.toml").write_text(RECIPE)
    out = root / "rows.aotc"
    build(root / "rows.toml", out, env_for(root / "cache"), root)
    return out


WIDTHS = [(1, 4096, 8), (700, 8192, 16), (1024, 4096, 8)]


@pytest.mark.parametrize(("rows", "cols", "warps"), WIDTHS)
def test_each_width_runs_the_warps_its_rule_gives(
    fake: FakeLib, bundle: Path, rows: int, cols: int, warps: int
) -> None:
    kernel = loader.open(bundle)["rows"]
    x = Tensor(0x100000, (rows, cols))
    variant = kernel.variant_for(x, cols)
    assert (variant.num_warps, variant.num_stages) == (warps, 1)
    assert variant.meta["BLOCK_SIZE"] == cols
    kernel(x, cols)
    assert kernel.variant_for(x, cols).num_warps == warps  # the checked and the fast path


def test_a_width_between_runs_the_wider_block_and_one_past_is_refused(
    fake: FakeLib, bundle: Path
) -> None:
    kernel = loader.open(bundle)["rows"]
    assert kernel.variant_for(Tensor(0x100000, (4, 5000)), 5000).num_warps == 16
    with pytest.raises(ArgumentError, match="BLOCK_SIZE = next_power_of_2"):
        kernel(Tensor(0x100000, (4, 20000)), 20000)


def test_inspect_lists_every_config_a_bucket_holds(bundle: Path) -> None:
    """`aotc inspect` shows each derived value's config of a bucket, not only the first."""
    from aot.inspect import inspect

    text = inspect(bundle)
    assert "BLOCK_SIZE=4096 warps=8 stages=1" in text
    assert "BLOCK_SIZE=8192 warps=16 stages=1" in text


def test_no_variant_is_compiled_for_a_width_its_rule_forbids(bundle: Path) -> None:
    """A bucket over the listed widths compiles each config only for the widths whose
    rule lets it run: 8 warps at BLOCK_SIZE 4096, 16 at 8192, never 16 at 4096 (the
    loader could not launch it). It used to compile both widths for each config."""
    from loader.format import BundleFile

    with BundleFile(bundle) as bf:
        (instance,) = bf.spec.kernels[0].instances
    held = sorted({(v.meta["BLOCK_SIZE"], v.num_warps) for v in instance.variants.values()})
    assert held == [(4096, 8), (8192, 16)]


def test_a_constraint_may_read_a_derived_meta_parameter(fake: FakeLib, tmp_path: Path) -> None:
    """At least a warp per 1024 elements of the block: 8 warps only at width 8192."""
    (tmp_path / "rows.py").write_text(KERNEL)
    recipe = RECIPE.replace(
        '"num_warps == min(16, max(4, next_power_of_2(n_cols) // 512))", "num_stages == 1"',
        '"num_warps >= BLOCK_SIZE // 1024"',
    ).replace("num_warps = [8, 16], num_stages = [1, 2]", "num_warps = [4, 8]")
    (tmp_path / "rows.toml").write_text(recipe)
    build(tmp_path / "rows.toml", tmp_path / "rows.aotc", env_for(tmp_path / "cache"), tmp_path)
    kernel = loader.open(tmp_path / "rows.aotc")["rows"]
    assert kernel.variant_for(Tensor(0x100000, (16, 8192)), 8192).num_warps == 8
    assert kernel.variant_for(Tensor(0x100000, (16, 4096)), 4096).meta["BLOCK_SIZE"] == 4096


def test_a_derived_value_passed_by_keyword_is_checked_against_what_the_bundle_computes(
    fake: FakeLib, bundle: Path
) -> None:
    """As a library's wrapper passes it (``BLOCK_SIZE=...``): the value the bundle computes
    runs (loader/keywords.py); another is refused, saying how the bundle computes it."""
    kernel = loader.open(bundle)["rows"]
    kernel(Tensor(0x100000, (4, 4096)), 4096, BLOCK_SIZE=4096)
    assert len(fake.launches) == 1
    said = r"has BLOCK_SIZE = 4096 \(the recipe derives it: BLOCK_SIZE = next_power_of_2\(n_cols"
    with pytest.raises(ArgumentError, match=r"got BLOCK_SIZE=8192, .*" + said):
        kernel(Tensor(0x100000, (4, 4096)), 4096, BLOCK_SIZE=8192)
    assert len(fake.launches) == 1


CHAINED = """
import triton
import triton.language as tl


@triton.jit
def half_kernel(X, n_cols, BLOCK_SIZE: tl.constexpr, HALF: tl.constexpr):
    offs = tl.arange(0, HALF)
    x = tl.load(X + tl.program_id(0) * n_cols + offs, mask=offs < n_cols)
    tl.store(X + tl.program_id(0) * n_cols + offs, x * 2, mask=offs < n_cols)
"""


def test_a_refusal_shows_a_chained_derived_value_as_this_call_computes_it(
    fake: FakeLib, tmp_path: Path
) -> None:
    """HALF reads BLOCK_SIZE: the message computes it from this call's BLOCK_SIZE (512),
    not from the one a variant was built with (which gave 2048, a value the bundle holds,
    so HALF went unmentioned)."""
    (tmp_path / "rows.py").write_text(CHAINED)
    recipe = (
        RECIPE.replace("row_kernel", "half_kernel")
        .replace("sizes = { n_cols = [4096, 8192] }", "sizes = { n_cols = [4096] }")
        .replace(
            '"next_power_of_2(n_cols)" }', '"next_power_of_2(n_cols)", HALF = "BLOCK_SIZE // 2" }'
        )
        .replace("num_warps = [8, 16], num_stages = [1, 2]", "num_warps = [8], num_stages = [1]")
    )
    recipe = recipe[: recipe.index("constraints")]
    (tmp_path / "rows.toml").write_text(recipe)
    build(tmp_path / "rows.toml", tmp_path / "rows.aotc", env_for(tmp_path / "cache"), tmp_path)
    kernel = loader.open(tmp_path / "rows.aotc")["rows"]
    assert kernel.variant_for(Tensor(0x100000, (4, 4096)), 4096).meta["HALF"] == 2048
    with pytest.raises(ArgumentError) as e:
        kernel(Tensor(0x100000, (4, 1000)), 1000)
    assert "BLOCK_SIZE = next_power_of_2(n_cols) is 1024 at this call" in str(e.value)
    assert "HALF = BLOCK_SIZE // 2 is 512 at this call" in str(e.value)
