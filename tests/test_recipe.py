"""Recipe validation: a table of bad recipes and the message each must produce."""

from __future__ import annotations

import shutil
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
        [
            "fixed.num_warps: num_warps is a launch option, not a constexpr: put it in space "
            "(space.num_warps = [4]; a one-element list is fine), or, to choose it per call from "
            "other values, list every value the rule gives in space.num_warps and state the rule "
            'as a constraint, e.g. constraints = ["num_warps == min(16, max(4, BLOCK_SIZE // '
            '512))"]'
        ],
    ),
    (
        "num_warps derived",
        "[kernel.space]",
        'derived = { num_stages = "2 if n > 4096 else 3" }\n[kernel.space]',
        [
            "[[kernel]] scale.derived.num_stages: num_stages is a launch option, not a constexpr "
            "parameter, so it is not derived: list every value the rule gives in "
            "space.num_stages and state the rule as a constraint, constraints = "
            '["num_stages == (2 if n > 4096 else 3)"] (constraints read meta-parameters, derived '
            "values, sizes, num_warps and num_stages"
        ],
    ),
    ("space dup", "BLOCK = [256, 1024]", "BLOCK = [256, 256]", ["lists a value twice"]),
    (
        "float call value",  # a float constexpr the caller passes (unsloth's eps)
        "[kernel.space]\nBLOCK = [256, 1024]",
        'call = { blk_ = "keyword" }\nsizes = { blk_ = [1e-5, 1e-6] }\n'
        'derived = { BLOCK = "blk_" }\n[kernel.space]',
        [
            "[[kernel]] scale.sizes.blk_: 1e-05 is a float, and sizes and call values are "
            "integers: a float constexpr passed per call (BLOCK) cannot take its value from a "
            "call value. Give it in fixed instead, one [[kernel]] entry (each with its own name) "
            "per value the callers use: fixed = { BLOCK = 1e-05 } in one, fixed = { BLOCK = "
            "1e-06 } in another; or, if callers pass any value, make it a runtime float "
            "parameter of the kernel (BLOCK: float, not tl.constexpr)"
        ],
    ),
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
    (
        "bucket on no argument",
        "buckets = { n = [1024, 65536] }",
        "buckets = { n_rows = [1024, 65536] }",
        [
            "buckets.n_rows: 'n_rows' is neither an argument",
            'call = { n_rows = "shape(ARG, DIM)" }',
        ],
    ),
    # bool and float compare equal to 1 in Python
    ("format true", "format = 1", "format = true", ["format: True is not a recipe format"]),
    ("format float", "format = 1", "format = 1.0", ["format: 1.0 is not a recipe format"]),
    (
        "bucket bound past i32",
        "[1024, 65536]",
        "[1024, 4294967296]",
        ["buckets.n: 4294967296 does not fit in i32 (the type of n in signature)"],
    ),
    (
        "bucket bound 10**23",
        "[1024, 65536]",
        "[1024, 100000000000000000000000]",
        ["buckets.n: 100000000000000000000000 does not fit in i32"],
    ),
    (
        "size past i32",
        "buckets = { n = [1024, 65536] }",
        "sizes = { n = 2147483648 }",
        ["sizes.n: 2147483648 does not fit in i32 (the type of n in signature)"],
    ),
    (
        "fixed past i64",
        "[kernel.space]",
        "fixed = { EXTRA = 9223372036854775808 }\n[kernel.space]",
        ["fixed.EXTRA: 9223372036854775808 does not fit in i64"],
    ),
    (
        "space past i64",
        "BLOCK = [256, 1024]",
        "BLOCK = [256, -9223372036854775809]",
        ["space.BLOCK: -9223372036854775809 does not fit in i64"],
    ),
    (
        "specialization float",
        "[kernel.space]",
        "specializations = [{ n = 16.0 }]\n[kernel.space]",
        ["specializations[0].n: 16.0: use 16"],
    ),
    (
        "flops reads an unsized argument",
        'alpha = "fp32" }',
        'alpha = "fp32" }\ncall = { k = "keyword" }\ntune = { flops = "2 * n * k" }',
        [
            "scale.tune.flops: reads k, which is neither a bucket key nor in sizes; give it a "
            "representative value under [[kernel]] scale.sizes"
        ],
    ),
    (
        "flops reads a searched meta-parameter",
        'alpha = "fp32" }',
        'alpha = "fp32" }\ntune = { bytes = "n * BLOCK" }',
        ["scale.tune.bytes: reads BLOCK, a searched meta-parameter (in space)"],
    ),
    (
        "flops reads a float argument",
        'alpha = "fp32" }',
        'alpha = "fp32" }\ntune = { flops = "n * alpha" }',
        ["scale.tune.flops: reads alpha, a pointer or float argument"],
    ),
    (
        "flops unknown name",
        'alpha = "fp32" }',
        'alpha = "fp32" }\ntune = { flops = "n * nope" }',
        ["scale.tune.flops: unknown name(s) nope"],
    ),
    (
        "in_place names no pointer",
        'alpha = "fp32" }',
        'alpha = "fp32" }\ntune = { in_place = ["cache_ptr"] }',
        ["scale.tune.in_place", "cache_ptr"],
    ),
    (
        "expression too long",
        'grid = "cdiv(n, BLOCK)"',
        'grid = "' + "n + " * 400 + 'n"',
        ["scale.grid: ", "an expression is at most 1000 characters"],
    ),
    # Found by tests/test_fuzz_recipe.py: a ValueError in the heuristic, a RecursionError.
    (
        "tile size below 1",
        "BLOCK = [256, 1024]",
        "BLOCK = [-1, 1024]",
        ["space.BLOCK: -1: the grid reads BLOCK, so its values are tile sizes"],
    ),
    (
        "expression nested too deep",
        'grid = "cdiv(n, BLOCK)"',
        'grid = "' + "-" * 900 + 'n"',
        ["scale.grid: ", "is nested more than 100 levels deep"],
    ),
    (  # tomllib's time grows with the square of the key's length
        "dotted key of 20,000 parts",
        'version = "1.0"',
        'version = "1.0"\n[x]\ny = { ' + "a." * 20000 + "a = 1 }",
        ["recipe.toml: line 7: a dotted key of more than 32 parts nests tables too deep"],
    ),
    (
        "table header of 40 parts",
        "[kernel.space]",
        "[" + "a." * 40 + "a]\n[kernel.space]",
        ["recipe.toml: line 16: a dotted key of more than 32 parts"],
    ),
    (  # "$" matches before a trailing newline
        "kernel name with a newline",
        'name = "scale"',
        'name = "scale\\n"',
        ["[[kernel]] #1.name: missing or invalid ('scale\\n')"],
    ),
    (
        "array nested past the recursion limit",
        'version = "1.0"',
        'version = "1.0"\ndeep = ' + "[" * 5000 + "]" * 5000,
        ["arrays or tables are nested more than 32 levels deep"],
    ),
    (
        "array nested deeper than a recipe needs",
        "buckets = { n = [1024, 65536] }",
        "buckets = { n = " + "[" * 40 + "1" + "]" * 40 + " }",
        ["kernel[0].buckets.n...: arrays or tables are nested more than 32 levels deep"],
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
    ("missing arg", ', alpha = "fp32" }', " }", ["takes alpha, whose types are not annotated"]),
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
        "constexpr named like a call value",
        "\n[kernel.space]\nBLOCK = [256, 1024]\n",
        '\ncall = { BLOCK = "keyword" }\n[kernel.space]\n',
        [
            "scale.fixed: constexpr BLOCK of scale_kernel has no value; add it to fixed, space or "
            "derived. To take it per call from a size, name the size otherwise and derive BLOCK "
            'from it: call = { BLOCK_ = "shape(ARG, DIM)" } (or "stride(ARG, DIM)", or '
            '"keyword"), sizes = { BLOCK_ = [...] }, derived = { BLOCK = "BLOCK_" }'
        ],
    ),
    (
        "call value named like a constexpr",
        "\n[kernel.space]\n",
        '\ncall = { BLOCK = "keyword" }\n[kernel.space]\n',
        [
            "scale.call.BLOCK: BLOCK is a constexpr parameter of scale_kernel; name the call value "
            "otherwise and derive BLOCK from it: call = { BLOCK_ = ... }, derived = { BLOCK = "
            '"BLOCK_" }'
        ],
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
    ("grid divides by zero", "cdiv(n, BLOCK)", "n // 0", ["scale.grid: divides by zero at n=1024"]),
    (
        "grid divides by zero at one config",
        "cdiv(n, BLOCK)",
        "cdiv(n, BLOCK - 256)",
        ["scale.grid: divides by zero at n=1024 with BLOCK=256 warps=4 stages=1 on sm_80"],
    ),
    (
        "flops divides by zero at a bucket",
        'alpha = "fp32" }',
        'alpha = "fp32" }\ntune = { flops = "n // (n - 65536)" }',
        ["scale.tune.flops: 'n // (n - 65536)' divides by zero at n=65536"],
    ),
    (
        "grid past CUDA's limits",
        'grid = "cdiv(n, BLOCK)"',
        'grid = ["1", "n"]',
        [
            "no candidate fits sm_80: grid y exceeds CUDA's limit of 65,535 at n=65536 on sm_80 "
            "(y = 65,536)"
        ],
    ),
    (
        "kernel exits at import",
        "small.py:scale_kernel",
        "exits.py:scale_kernel",
        ["scale.source: exits.py called sys.exit(0) while being imported", "__main__"],
    ),
    (
        "kernel fails at import with an AttributeError",
        "small.py:scale_kernel",
        "attribute.py:scale_kernel",
        [
            "scale.source: importing attribute.py failed: AttributeError: 'int' object has no "
            "attribute 'nope'"
        ],
    ),
    (
        "kernel file not Python",
        "small.py:scale_kernel",
        "notes.txt:scale_kernel",
        ["scale.source: notes.txt is not a Python file; name a .py file"],
    ),
    (
        "kernel parses the command line at import",
        "small.py:scale_kernel",
        "parses_argv.py:scale_kernel",
        [
            "scale.source: parses_argv.py called sys.exit(2) while being imported; it printed: "
            "usage: parses_argv.py [-h] --size SIZE / parses_argv.py: error: the following "
            "arguments are required: --size"
        ],
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "fragments"), [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES]
)
def test_bad_recipe_at_plan(tmp_path: Path, old: str, new: str, fragments: list[str]) -> None:
    assert old in BASE, old
    shutil.copytree(DATA / "kernels", tmp_path / "kernels")
    small = (DATA / "kernels" / "small.py").read_text()
    (tmp_path / "kernels" / "exits.py").write_text("import sys\nsys.exit(0)\n" + small)
    (tmp_path / "kernels" / "notes.txt").write_text(small)
    (tmp_path / "kernels" / "attribute.py").write_text(f"{small}\n(1).nope\n")
    argv = "p = argparse.ArgumentParser()\np.add_argument('--size', required=True)\n"
    (tmp_path / "kernels" / "parses_argv.py").write_text(
        f"import argparse\n{argv}p.parse_args()\n{small}"
    )
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


def test_a_recipe_over_4_mib_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text(BASE + "#" * (4 << 20))
    with pytest.raises(RecipeError, match="is over 4 MiB; a recipe is a few KiB"):
        load(path)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match="no such file"):
        load(tmp_path / "nope.toml")
    with pytest.raises(RecipeError, match="is a directory"):
        load(tmp_path)


def test_example_recipe_is_valid() -> None:
    r = load(Path(__file__).parents[1] / "recipes" / "example.toml")
    assert {k.name for k in r.kernels} == {"matmul", "matmul_tma", "rmsnorm"}
    assert [(o.name, o.kernels) for o in r.ops] == [("gemm", ("matmul", "matmul_tma"))]
    assert [t.arch for t in r.targets] == ["sm_80", "sm_90"]
