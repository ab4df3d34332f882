"""Recipe validation: a table of bad recipes and the message each must produce."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot.errors import RecipeError
from aot.plan import make_plan
from aot.recipe import load

from .conftest import expect_recipe

DATA = Path(__file__).parent / "data"
BASE = (DATA / "small.toml").read_text()

# (id, old text, new text, expected message fragments). Each case edits the good recipe.
CASES = [
    ("toml syntax", 'name = "small"', 'name = "small', ["invalid TOML"]),
    ("unknown top key", "format = 1", "format = 1\nbundel = 3", ["bundel: unknown key"]),
    (
        "bundle key typo",
        'version = "1.0"',
        'verison = "1.0"',
        ["[bundle].verison: unknown key; did you mean 'version'?"],
    ),
    ("missing version", 'version = "1.0"\n', "", ["[bundle].version: missing"]),
    ("bad name", 'name = "small"', 'name = "my bundle"', ["[bundle].name", "letters, digits"]),
    (
        "unknown gpu",
        '"H100"]',
        '"H101"]',
        ["[bundle].targets[1]", "unknown GPU 'H101'", "did you mean"],
    ),
    (
        "no targets",
        'targets = ["sm_80", "H100"]',
        "targets = []",
        ["[bundle].targets: missing or empty"],
    ),
    ("duplicate target", '"H100"]', '"sm_80"]', ["listed twice"]),
    ("format", "format = 1", "format = 2", ["format: 2 is not a recipe format"]),
    (
        "kernel key typo",
        'grid = "cdiv(n, BLOCK)"',
        'grdi = "cdiv(n, BLOCK)"',
        ["[[kernel]] scale.grdi: unknown key; did you mean 'grid'?"],
    ),
    ("no grid", 'grid = "cdiv(n, BLOCK)"\n', "", ["[[kernel]] scale.grid: missing"]),
    (
        "grid eval",
        'grid = "cdiv(n, BLOCK)"',
        'grid = "__import__(1)"',
        ["[[kernel]] scale.grid", "not allowed"],
    ),
    (
        "grid true division",
        'grid = "cdiv(n, BLOCK)"',
        'grid = "n / BLOCK"',
        ["'/' is not allowed; use '//' or cdiv(a, b)"],
    ),
    (
        "grid unknown name",
        'grid = "cdiv(n, BLOCK)"',
        'grid = "cdiv(m, BLOCK)"',
        ["unknown name(s) m"],
    ),
    ("grid float", 'grid = "cdiv(n, BLOCK)"', 'grid = "n * 0.5"', ["literal 0.5"]),
    ("grid attribute", 'grid = "cdiv(n, BLOCK)"', 'grid = "n.real"', ["is not allowed"]),
    (
        "source format",
        'source = "kernels/small.py:scale_kernel"',
        'source = "kernels/small.py"',
        ["[[kernel]] scale.source", "'path/to/file.py:function_name'"],
    ),
    (
        "source missing file",
        "kernels/small.py:scale_kernel",
        "kernels/nope.py:scale_kernel",
        ["kernels/nope.py does not exist"],
    ),
    ("bad type", 'n = "i32"', 'n = "int32"', ["signature.n: unknown scalar type 'int32'"]),
    (
        "bad elem type",
        'x_ptr = "*T"',
        'x_ptr = "*float16"',
        ["signature.x_ptr: unknown element type 'float16'"],
    ),
    ("fp16 scalar", 'alpha = "fp32"', 'alpha = "fp16"', ["pass fp16/bf16 scalars as fp32"]),
    (
        "bad dtype",
        'T = ["fp16", "fp32"]',
        'T = ["fp16", "half"]',
        ["dtypes.T: 'half' is not an element type"],
    ),
    (
        "unused dtype var",
        'T = ["fp16", "fp32"]',
        'T = ["fp16"], U = ["fp32"]',
        ["dtypes.U: no argument in signature has type '*U'"],
    ),
    (
        "bucket not int",
        "buckets = { n = [1024, 65536] }",
        "buckets = { x_ptr = [1] }",
        ["buckets.x_ptr: bucket keys must be integer arguments"],
    ),
    ("bucket order", "[1024, 65536]", "[65536, 1024]", ["must be strictly increasing"]),
    ("bucket zero", "[1024, 65536]", "[0, 1024]", ["buckets.n: 0 is below the minimum 1"]),
    (
        "num_warps pow2",
        "num_warps = [4]",
        "num_warps = [3]",
        ["[[kernel]] scale.space.num_warps: 3 is not a power of two"],
    ),
    ("num_warps defaults to 4", "num_warps = [4]\n", "", []),
    (
        "num_warps in fixed",
        "[kernel.space]",
        "fixed = { num_warps = 4 }\n[kernel.space]",
        ["fixed.num_warps: put num_warps in space"],
    ),
    ("space dup", "BLOCK = [256, 1024]", "BLOCK = [256, 256]", ["lists a value twice"]),
    (
        "space is runtime arg",
        "BLOCK = [256, 1024]",
        "BLOCK = [256, 1024]\nn = [1]",
        ["space.n: n is a runtime argument"],
    ),
    (
        "default not in space",
        "num_warps = 4\n",
        "num_warps = 8\n",
        ["default.num_warps: 8 is not in space.num_warps [4]"],
    ),
    (
        "default not searched",
        "num_warps = 4\n",
        "GROUP = 8\n",
        ["default.GROUP: defaults apply to searched parameters"],
    ),
    ("no kernels", "[[kernel]]", "[[kernelz]]", ["kernelz: unknown key; did you mean 'kernel'?"]),
    (
        "spec unknown arg",
        "[kernel.space]",
        "specializations = [{ x_pt = 16 }]\n[kernel.space]",
        ["specializations[0].x_pt: not a pointer or integer argument; did you mean 'x_ptr'?"],
    ),
    (
        "spec bad value",
        "[kernel.space]",
        "specializations = [{ n = 8 }]\n[kernel.space]",
        ["8: use 16 (divisible by 16), 1 (equal to 1) or 0"],
    ),
    (
        "spec eq1 pointer",
        "[kernel.space]",
        "specializations = [{ x_ptr = 1 }]\n[kernel.space]",
        ["only integer arguments can be assumed equal to 1"],
    ),
    (
        "spec empty",
        "[kernel.space]",
        'specializations = [{ "*" = 0 }]\n[kernel.space]',
        ["assumes nothing"],
    ),
    (
        "constraint name",
        "[kernel.space]",
        'constraints = ["BLOK <= 4"]\n[kernel.space]',
        ["constraints[0]: unknown name(s) BLOK"],
    ),
    (
        "reference alone",
        "[kernel.space]",
        'reference = "kernels/small.py:x"\n[kernel.space]',
        ["scale.inputs: a reference needs inputs"],
    ),
    (
        "grid reads unsized",
        "buckets = { n = [1024, 65536] }\n",
        "",
        ["scale.grid: reads n, which is neither a bucket key nor in sizes"],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_recipe(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    assert old in BASE, old
    path = tmp_path / "recipe.toml"
    (tmp_path / "kernels").symlink_to(DATA / "kernels")
    path.write_text(BASE.replace(old, new, 1))
    expect_recipe(path, fragments)


# Errors only the plan stage can find: they need the kernel's real parameter list.
PLAN_CASES = [
    ("function missing", "small.py:scale_kernel", "small.py:nope", ["defines no 'nope'"]),
    ("not jit", "small.py:scale_kernel", "small.py:not_a_kernel", ["is not a @triton.jit"]),
    ("missing arg", ', alpha = "fp32" }', " }", ["takes alpha; give each a type"]),
    (
        "wrong order",
        'x_ptr = "*T", out_ptr = "*T"',
        'out_ptr = "*T", x_ptr = "*T"',
        ["function's order: x_ptr, out_ptr, n, alpha"],
    ),
    (
        "constexpr unset",
        "BLOCK = [256, 1024]\n",
        "",
        ["constexpr BLOCK of scale_kernel has no value"],
    ),
    (
        "meta not in fn",
        "BLOCK = [256, 1024]",
        "BLOCK = [256, 1024]\nBLOCK_M = [1]",
        ["space.BLOCK_M: scale_kernel has no constexpr named BLOCK_M"],
    ),
    (
        "nothing fits",
        "[kernel.space]",
        'constraints = ["BLOCK > SMEM"]\n[kernel.space]',
        ["no candidate fits sm_80"],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "fragments"), [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES]
)
def test_bad_recipe_at_plan(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    assert old in BASE, old
    (tmp_path / "kernels").symlink_to(DATA / "kernels")
    path = tmp_path / "recipe.toml"
    text = BASE.replace(old, new, 1)
    if "BLOCK = [" not in text:  # the grid must not read the constexpr we removed
        text = text.replace("cdiv(n, BLOCK)", "cdiv(n, 256)")
    path.write_text(text)
    with pytest.raises(RecipeError) as e:
        make_plan(load(path))
    for f in fragments:
        assert f in str(e.value), str(e.value)


def test_good_recipe_parses() -> None:
    r = load(DATA / "small.toml")
    assert r.name == "small" and r.bundle_filename == "small-1.0.aotc"
    assert [t.name for t in r.targets] == ["sm_80", "H100"]
    (k,) = r.kernels
    assert k.signature == {"x_ptr": "*T", "out_ptr": "*T", "n": "i32", "alpha": "fp32"}
    assert k.space["num_warps"] == (4,) and k.space["BLOCK"] == (256, 1024)
    # default specialization: pointers and non-bucket ints divisible by 16
    assert k.specializations == ({"x_ptr": 16, "out_ptr": 16},)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="no such file"):
        load(tmp_path / "nope.toml")
    with pytest.raises(RecipeError, match="is a directory"):
        load(tmp_path)


def test_example_recipe_is_valid() -> None:
    r = load(Path(__file__).parents[1] / "recipes" / "example.toml")
    assert {k.name for k in r.kernels} == {"matmul", "rmsnorm"}
    assert [t.arch for t in r.targets] == ["sm_80", "sm_90"]
