"""``call = { x_stride = "stride(X, 0)" }``: a tensor argument's stride as a call value.

unsloth's RMS norm takes its row strides as constexprs (``X_row_stride: tl.constexpr``,
launched with ``X.stride(0)``). A recipe reads the stride per call and derives the
constexpr from it, one variant per stride: a view whose rows lie further apart (a slice
``big[:, :N]`` of a wider tensor) runs a variant built for its stride, or is refused,
never one built for contiguous rows. Built on the CPU, called on the fake driver, through
the checked and the fast path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import loader
from aot.build import build
from aot.inspect import inspect
from aot.plan import make_plan
from aot.recipe import load
from aot.summary import describe_plan
from loader import manifest as mf
from loader.bundle import Kernel
from loader.format import BundleFile
from tests.fakecuda import FakeArray, FakeLib, FakeTensor
from tests.test_pipeline_recipe import GOOD
from tests.test_pipeline_recipe import write as write_mlp

from .conftest import env_for, expect_recipe

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def rms_kernel(
    Y, Y_row_stride: tl.constexpr,
    X, X_row_stride: tl.constexpr,
    W,
    n_cols: tl.constexpr,
    eps: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(X + row * X_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * Y_row_stride + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)
"""

INPUTS = """
import torch


def rms_inputs(sizes, dtypes, device="cuda"):
    rows, cols = sizes["n_rows"], sizes["cols"]
    # X's rows x_stride elements apart: a view of a wider tensor where x_stride > cols
    x = torch.randn(rows, sizes["x_stride"], device=device, dtype=torch.float16)[:, :cols]
    y = torch.empty(rows, cols, device=device, dtype=torch.float16)
    return [y, x, torch.ones(cols, device=device, dtype=torch.float16)]
"""

COMMON = (
    'grid = "n_rows"\n'
    'call = { n_rows = "shape(X, 0)", cols = "shape(X, 1)", x_stride = "stride(X, 0)", '
    'y_stride = "stride(Y, 0)" }\n'
    "buckets = { n_rows = [1, 1024] }\n"
    'derived = { n_cols = "cols", X_row_stride = "x_stride", Y_row_stride = "y_stride", '
    'BLOCK_SIZE = "next_power_of_2(cols)" }\n'
    "fixed = { eps = 1e-6 }\n"
    "space = { num_warps = [4], num_stages = [1] }\n"
)

# rms: contiguous rows only (each width its own stride); rms_views: rows 1024 or 4096 apart
RECIPE = f"""format = 1
[bundle]
name = "strides"
version = "0.1.0"
targets = ["sm_90"]

[[kernel]]
name = "rms"
source = "rms.py:rms_kernel"
inputs = "ref.py:rms_inputs"
sizes = {{ cols = [1024, 4096], x_stride = "cols", y_stride = "cols" }}
{COMMON}
[[kernel]]
name = "rms_views"
source = "rms.py:rms_kernel"
inputs = "ref.py:rms_inputs"
sizes = {{ cols = 1024, x_stride = [1024, 4096], y_stride = "cols" }}
{COMMON}"""


def write(root: Path, recipe: str = RECIPE, inputs: str = INPUTS) -> Path:
    (root / "rms.py").write_text(KERNEL)
    (root / "ref.py").write_text(inputs)
    (root / "strides.toml").write_text(recipe)
    return root / "strides.toml"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("strides")
    out = root / "strides.aotc"
    build(write(root), out, env_for(root / "cache"), root)
    return out


def T(addr: int, *shape: int, strides: tuple[int, ...] | None = None) -> FakeTensor:
    return FakeTensor(addr, "torch.float16", shape=shape, strides=strides)


def rms_args(rows: int, cols: int, x_stride: int | None = None) -> tuple[Any, ...]:
    """Y, X, W; X a view of a tensor x_stride wide when given (``big[:, :cols]``)."""
    x = T(0x10000, rows, cols, strides=None if x_stride is None else (x_stride, 1))
    return (T(0x20000, rows, cols), x, T(0x30000, cols))


def fast_launch(fake: FakeLib, k: Kernel, args: tuple[Any, ...], mp: pytest.MonkeyPatch,
                **call: Any) -> mf.VariantSpec:  # fmt: skip
    """Launch through the fast path only (the checked path would fail the test); the
    variant it launched."""

    def no_checked_path(*a: Any) -> None:
        raise AssertionError("the fast path fell back to the checked path")

    found = k._fast.lookup(args, call)
    assert found is not None
    before = len(fake.launches)
    with mp.context() as m:
        m.setattr(k, "_call_checked", no_checked_path)
        k(*args, **call)
    assert len(fake.launches) == before + 1
    return found[0].variant


def test_plan_inspect_and_the_manifest_name_the_stride(bundle: Path, tmp_path: Path) -> None:
    values = "n_rows = shape(X, 0), cols = shape(X, 1), x_stride = stride(X, 0)"
    assert f"call values: {values}" in describe_plan(make_plan(load(write(tmp_path))))
    text = inspect(bundle)
    assert f"call values: {values}, y_stride = stride(Y, 0)" in text
    assert "per call: X_row_stride = x_stride" in text
    with BundleFile(bundle) as bf:
        raw = json.loads(json.dumps(bf.manifest))
    call = raw["kernels"][0]["call"]
    # A stride under a key of its own: a loader from before strides ignores it and sees a
    # value passed by keyword (which it asks for), never a shape read in its place.
    assert call[2] == {"name": "x_stride", "stride_of": "X", "rank": 2}
    assert call[1] == {"name": "cols", "arg": "X", "dim": 1, "rank": 2}
    del call[2]["stride_of"]
    old = mf.Manifest.from_json(raw).kernels[0].call[2]
    assert (old.tensor, old.text) == (None, "keyword")


@pytest.mark.parametrize("cols", [1024, 4096])
def test_contiguous_rows_run_the_variant_of_their_stride(
    fake: FakeLib, bundle: Path, monkeypatch: pytest.MonkeyPatch, cols: int
) -> None:
    rms = loader.open(bundle)["rms"]
    args = rms_args(5, cols)
    meta = rms.variant_for(*args).meta
    assert (meta["X_row_stride"], meta["Y_row_stride"], meta["n_cols"]) == (cols, cols, cols)
    rms(*args)  # the checked path, which teaches the fast path
    assert fake.launches[-1].grid == (5, 1, 1)
    assert fast_launch(fake, rms, rms_args(7, cols), monkeypatch).meta == meta
    assert fake.launches[-1].grid == (7, 1, 1)


def test_a_view_of_a_wider_tensor_is_refused_on_both_paths(fake: FakeLib, bundle: Path) -> None:
    rms = loader.open(bundle)["rms"]
    rms(*rms_args(4, 1024))
    launched = len(fake.launches)
    view = rms_args(4, 1024, x_stride=3000)  # big[:, :1024] of a 3000-wide big
    assert rms._fast.lookup(view, {}) is None  # the same signature, but no variant fits
    with pytest.raises(loader.ArgumentError) as e:
        rms(*view)
    assert str(e.value) == (
        "rms(): no variant in the bundle was built for this call: X_row_stride = x_stride is "
        "3000 at this call, and the bundle's variants have X_row_stride in {1024, 4096} (at "
        "cols=1024, x_stride=3000, y_stride=1024). Pass arguments it was built for (x_stride "
        "= stride(X, 0)), or add the value to the recipe's sizes (or buckets) and rebuild"
    )
    # A stride some variant has, but not at this width: the values beside the variants'.
    with pytest.raises(loader.ArgumentError) as e:
        rms(*rms_args(4, 1024, x_stride=4096))
    assert (
        "no variant meets the derived values and constraints together: n_cols, X_row_stride, "
        "Y_row_stride, BLOCK_SIZE (n_cols=1024, X_row_stride=4096, Y_row_stride=1024, "
        "BLOCK_SIZE=1024 at this call; the variants have (1024, 1024, 1024, 1024), "
        "(4096, 4096, 4096, 4096))"
    ) in str(e.value)
    assert "x_stride = stride(X, 0)" in str(e.value)
    assert len(fake.launches) == launched


def test_a_single_rows_stride_is_never_stepped_along_so_any_is_served(
    fake: FakeLib, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One row (decode at M = 1): the stride between rows is never used, and torch leaves
    it whatever the view had (``big[i:i + 1, :N]`` keeps big's, ``col.t()`` reads 1). It
    is read as a dense tensor's, so the call runs the variant built for contiguous rows,
    on both paths, where before it was refused."""
    rms = loader.open(bundle)["rms"]
    for stride in (3000, 1, 1024):
        args = rms_args(1, 1024, x_stride=stride)
        assert rms.variant_for(*args).meta["X_row_stride"] == 1024
        rms(*args)
        assert fake.launches[-1].grid == (1, 1, 1)
        assert fast_launch(fake, rms, args, monkeypatch).meta["X_row_stride"] == 1024
    with pytest.raises(loader.ArgumentError, match="X_row_stride = x_stride is 3000"):
        rms(*rms_args(2, 1024, x_stride=3000))  # two rows: the stride is stepped along


def test_a_view_runs_the_variant_built_for_its_stride(
    fake: FakeLib, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = loader.open(bundle)["rms_views"]
    for stride in (4096, 1024):
        args = rms_args(3, 1024, x_stride=stride)
        assert views.variant_for(*args).meta["X_row_stride"] == stride
        views(*args)
        launched = fast_launch(fake, views, rms_args(9, 1024, x_stride=stride), monkeypatch)
        assert (launched.meta["X_row_stride"], launched.meta["Y_row_stride"]) == (stride, 1024)
    assert views.variant_for(*rms_args(3, 1024)).meta["X_row_stride"] == 1024  # contiguous
    with pytest.raises(loader.ArgumentError, match=re.escape(
            "X_row_stride = x_stride is 2048 at this call, and the bundle's variants have "
            "X_row_stride in {1024, 4096}")):  # fmt: skip
        views(*rms_args(3, 1024, x_stride=2048))


def test_a_stride_passed_by_keyword_is_the_calls(
    fake: FakeLib, bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    views = loader.open(bundle)["rms_views"]
    args = rms_args(2, 1024)
    assert views.variant_for(*args, x_stride=4096).meta["X_row_stride"] == 4096
    views(*args, x_stride=4096)
    assert fast_launch(fake, views, args, monkeypatch, x_stride=4096).meta["X_row_stride"] == 4096
    assert fast_launch(fake, views, args, monkeypatch).meta["X_row_stride"] == 1024
    with pytest.raises(loader.ArgumentError, match="call value x_stride must be an int"):
        views(*args, x_stride="4096")


def test_a_tensor_of_another_rank_is_refused_unless_the_stride_is_passed(
    fake: FakeLib, bundle: Path
) -> None:
    rms = loader.open(bundle)["rms"]
    y, _, w = rms_args(4, 1024)
    x = T(0x10000, 2, 4, 1024)
    rms(y, T(0x10000, 4, 1024), w)
    shapes = {"n_rows": 4, "cols": 1024}
    assert rms._fast.lookup((y, x, w), shapes) is None
    with pytest.raises(loader.ArgumentError) as e:
        rms(y, x, w, **shapes)
    assert str(e.value) == (
        "rms(): x_stride is the stride of dimension 0 of X, which the bundle was built for as "
        "2-D; this X is 3-D: pass x_stride=... by keyword, or reshape"
    )
    rms(y, x, w, **shapes, x_stride=1024)
    assert fake.launches[-1].grid == (4, 1, 1)


def test_another_rank_names_every_value_to_pass_at_once(fake: FakeLib, bundle: Path) -> None:
    """A caller handing the [batch, seq, width] tensors of unsloth's wrapper to a bundle
    built for [rows, width] learns every value to pass from the first refusal, those read
    off X and off Y alike, not one per attempt."""
    rms = loader.open(bundle)["rms"]
    y, x, w = T(0x20000, 2, 4, 1024), T(0x10000, 2, 4, 1024), T(0x30000, 1024)
    with pytest.raises(loader.ArgumentError) as e:
        rms(y, x, w)
    assert str(e.value) == (
        "rms(): n_rows is dimension 0 of X's shape, which the bundle was built for as 2-D; "
        "this X is 3-D: pass n_rows=..., cols=..., x_stride=..., y_stride=... by keyword, "
        "or reshape"
    )
    with pytest.raises(loader.ArgumentError, match=re.escape("pass x_stride=..., y_stride=... by")):
        rms(y, x, w, n_rows=8, cols=1024)
    rms(y, x, w, n_rows=8, cols=1024, x_stride=1024, y_stride=1024)
    assert fake.launches[-1].grid == (8, 1, 1)


def test_array_interface_strides_are_bytes_and_raw_pointers_have_none(
    fake: FakeLib, bundle: Path
) -> None:
    views = loader.open(bundle)["rms_views"]
    y, _, w = rms_args(4, 1024)
    wide = FakeArray(0x10000, "<f2", shape=(4, 1024), strides=(8192, 2))  # 4096 fp16 apart
    assert views.variant_for(y, wide, w).meta["X_row_stride"] == 4096
    dense = FakeArray(0x10000, "<f2", shape=(4, 1024))  # no strides: row-major and dense
    assert views.variant_for(y, dense, w).meta["X_row_stride"] == 1024
    odd = FakeArray(0x10000, "<f2", shape=(4, 1024), strides=(8191, 2))
    with pytest.raises(loader.ArgumentError) as e:
        views(y, odd, w)
    assert str(e.value) == (
        "rms_views(): x_stride is the stride of dimension 0 of X: its __cuda_array_interface__ "
        "strides [8191, 2] (bytes) are no multiples of its element size ('<f2'); pass "
        "x_stride=... by keyword"
    )
    shapes = {"n_rows": 4, "cols": 1024}
    with pytest.raises(loader.ArgumentError) as e:
        views(y, 0x10000, w, **shapes)
    assert str(e.value) == (
        "rms_views(): x_stride is the stride of dimension 0 of X, which this argument does "
        "not have; pass x_stride=... by keyword"
    )
    assert views.variant_for(y, 0x10000, w, **shapes, x_stride=4096).meta["X_row_stride"] == 4096
    assert fake.launches == []


BAD = [
    ('x_stride = "stride(X, 0)"', 'x_stride = "strides(X, 0)"',
     ['rms.call.x_stride: \'strides(X, 0)\': give "keyword" (the caller passes it), "shape(ARG, '
      'DIM)" (a dimension of an argument\'s shape) or "stride(ARG, DIM)" (its stride, in '
      "elements)"]),
    ('x_stride = "stride(X, 0)"', 'x_stride = "stride(Z, 0)"',
     ["rms.call.x_stride: Z is not a runtime argument of rms_kernel (Y, X, W)"]),
    ('x_stride = "stride(X, 0)"', 'x_stride = "stride(X, 2)"',
     ["rms.call.x_stride: stride(X, 2): X is 2-D in the recipe's inputs, so its dimensions "
      "are 0 to 1"]),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "fragments"), BAD)
def test_bad_stride_values(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    expect_recipe(write(tmp_path, RECIPE.replace(old, new, 1)), fragments)


def test_a_stride_is_read_off_a_tensor(tmp_path: Path) -> None:
    recipe = RECIPE.replace(
        'inputs = "ref.py:rms_inputs"', 'signature = { Y = "*fp16", X = "*fp16", W = "i32" }', 1
    )
    recipe = recipe.replace('y_stride = "stride(Y, 0)"', 'y_stride = "stride(W, 0)"', 1)
    expect_recipe(write(tmp_path, recipe), [
        "rms.call.y_stride: stride(W, 0): W is i32, no tensor; a stride is read off a tensor "
        'argument (or make it "keyword")'])  # fmt: skip


def test_inputs_must_build_the_stride_the_sizes_name(tmp_path: Path) -> None:
    """An inputs that ignores x_stride makes contiguous rows: tuning at x_stride = 4096
    would time the variant built for 1024."""
    contiguous = INPUTS.replace('sizes["x_stride"]', "cols")
    expect_recipe(write(tmp_path, inputs=contiguous), [
        "rms_views.inputs: x_stride = stride(X, 0) is 1024 in the arguments inputs returned, "
        "but the sizes give x_stride = 4096 there: build X with that stride"])  # fmt: skip


def test_a_pipeline_step_reads_a_stride_off_its_tensor(tmp_path: Path) -> None:
    """The pipeline's tensors are row-major and dense: x [M, 4096] has rows 4096 apart."""
    call = 'grid = "M"\ncall = { xs = "stride(x_ptr, 0)", cols = "shape(x_ptr, 1)" }'
    (spec,) = load(write_mlp(tmp_path, GOOD.replace('grid = "M"', call, 1))).pipelines
    rmsnorm = next(s for s in spec.steps if s.kernel == "rmsnorm")
    assert rmsnorm.args[-2:] == ("4096", "4096")
    bad = GOOD.replace('grid = "M"', call.replace("x_ptr, 0", "x_ptr, 2"), 1)
    expect_recipe(write_mlp(tmp_path, bad), [
        "(rmsnorm).args.xs: xs = stride(x_ptr, 2), but 'x' has 2 dimensions; give xs = ... in "
        "args"])  # fmt: skip
