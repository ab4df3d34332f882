"""``aotc init FILE.py``: a draft recipe per kernel file, placeholders that ``aotc plan``
names, and a draft that plans once a person fills them in with the values the gallery's
own recipes use."""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from aot.cli.commands import cli
from aot.errors import RecipeError
from aot.init import toml_value
from aot.plan import make_plan
from aot.recipe import load

from .conftest import expect_recipe

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "recipes" / "gallery"
SHIPPED = ROOT / "tests" / "data" / "shipped"


def invoke(args: list[str], cache: Path) -> Result:
    """``aotc ARGS`` in this process; a traceback (any exception but the exit) fails the test."""
    env = {"AOTC_CACHE_DIR": str(cache), "AOTC_NO_PROGRESS": "1"}
    r = CliRunner().invoke(cli, args, env=env, prog_name="aotc")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    return r


def copy_without_recipes(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    for recipe in dest.glob("*.toml"):
        recipe.unlink()
    return dest


@pytest.fixture
def gallery(tmp_path: Path) -> Path:
    """The gallery's kernels and references, without its recipes."""
    return copy_without_recipes(GALLERY, tmp_path / "gallery")


def dump(doc: Mapping[str, Any]) -> str:
    """A recipe as TOML: the bundle table, then each kernel with inline values."""
    lines = [f"format = {doc['format']}", "[bundle]"]
    lines += [f"{k} = {toml_value(v)}" for k, v in doc["bundle"].items()]
    for kernel in doc["kernel"]:
        lines.append("[[kernel]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in kernel.items()]
    return "\n".join(lines) + "\n"


def placeholders(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(placeholders(v) for v in value.values())
    if isinstance(value, list):
        return any(placeholders(v) for v in value)
    return isinstance(value, str) and value.startswith("TODO")


def fill(draft: Mapping[str, Any], real: Mapping[str, Any], reviewed: set[str]) -> dict[str, Any]:
    """The edits a person makes: every key holding a placeholder or a value marked for
    review takes the real recipe's value (or goes, if the real recipe has none), and the
    keys the draft's comments suggest (call, reference, optional, ...) are added."""
    out = {k: v for k, v in draft.items() if not placeholders(v) and k not in reviewed}
    out.update({k: v for k, v in real.items() if k not in ("name", "source")})
    return out


def draft_of(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text()
    return tomllib.loads(text), text


def flat(text: str) -> str:
    """The draft's text with its wrapped comments joined, to look for phrases."""
    return " ".join(line.strip() for line in text.replace("\n# ", " ").splitlines())


def reviewed_keys(text: str) -> set[str]:
    """Keys whose line says ``# TODO`` (suggested values), the table's first part."""
    return {
        line.split("=")[0].strip().split(".")[0]
        for line in text.splitlines()
        if not line.startswith("#") and "# TODO" in line
    }


# (file stem, kernel attribute, gallery recipe kernel name, the draft's name, what the draft
# says that is particular to the kernel)
GALLERY_CASES = [
    ("matmul", "matmul_kernel", "matmul", "matmul",
     ["@triton.autotune (13 configs) over @triton.jit", "autotune's 13 configs",
      "pruned per bucket by its prune_configs_by"]),
    ("softmax", "softmax_kernel", "softmax", "softmax",
     ["# EVEN_N = n_cols % BLOCK_N == 0, from @triton.heuristics", "autotune's 6 configs",
      "n_rows is no argument of the kernel", '# call = { n_rows = "shape(ARG, 0)" }']),
    ("splitk", "splitk_matmul_kernel", "splitk", "splitk_matmul",
     ["# EVEN_K = K % (BLOCK_K * SPLIT_K) == 0, from @triton.heuristics",
      "c_ptr zeroed around each timed launch (reset_to_zero)"]),
    ("rmsnorm", "_rms_norm_forward_kernel", "rmsnorm", "rms_norm_forward",
     ['derived.BLOCK_SIZE = "TODO"', "n_rows is no argument of the kernel",
      # the wrapper passes BLOCK_SIZE=BLOCK_SIZE, from calculate_settings(n_cols): derived
      "rms_norm_forward() launches the kernel with this constexpr from its own values per "
      "call (BLOCK_SIZE = BLOCK_SIZE): give it in derived rather than search it"]),
]  # fmt: skip


@pytest.mark.parametrize(("stem", "attr", "real_name", "name", "says"), GALLERY_CASES)
def test_a_gallery_kernel_drafts_and_plans_once_filled_in(
    gallery: Path, tmp_path: Path, stem: str, attr: str, real_name: str, name: str, says: list[str]
) -> None:
    r = invoke(["init", str(gallery / f"{stem}.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    path = gallery / f"{stem}.toml"
    assert r.stdout.startswith(f"wrote {path}: a draft recipe for 1 kernel of {stem}.py")
    assert f"  {name} ({attr}: " in r.stdout and "fill in: inputs, grid" in r.stdout
    doc, text = draft_of(path)
    for fragment in says:
        assert fragment in text or fragment in flat(text), fragment
    (kernel,) = doc["kernel"]
    assert kernel["name"] == name and kernel["source"] == f"{stem}.py:{attr}"
    assert kernel["inputs"] == f"TODO.py:{name}_inputs" and kernel["grid"] == "TODO"
    assert "signature" not in kernel  # inferred
    assert kernel["dtypes"] == {"T": ["fp16", "bf16"]}
    assert doc["bundle"] == {"name": stem, "version": "0.1.0", "targets": ["sm_80", "sm_90"]}
    real = tomllib.loads((GALLERY / f"{stem}.toml").read_text())
    (real_kernel,) = [k for k in real["kernel"] if k["name"] == real_name]
    # The grid the file's own wrapper launches with, in aotc's terms, is the gallery's.
    assert f"# grid = {toml_value(real_kernel['grid'])}  (from " in text
    # autotune's configs are the search space; a plain @triton.jit gets a skeleton.
    assert ("space" in kernel) == (stem == "rmsnorm")

    r = invoke(["plan", str(path)], tmp_path / "c")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"[[kernel]] {name}.inputs: 'TODO.py:{name}_inputs' is a placeholder left by aotc " in (
        r.stderr
    )
    assert f"(also to fill in: {name}.grid" in r.stderr

    doc["kernel"] = [fill(kernel, real_kernel, reviewed_keys(text))]
    path.write_text(dump(doc))
    plan = make_plan(load(path))
    real_plan = make_plan(load(GALLERY / f"{stem}.toml"))
    ours = [(len(i.configs), i.dtypes) for i in plan.instances]
    assert ours == [(len(i.configs), i.dtypes) for i in real_plan.instances if i.kernel.name
                    == real_name]  # fmt: skip


def test_plan_names_the_grid_when_only_the_grid_is_left(gallery: Path, tmp_path: Path) -> None:
    assert invoke(["init", str(gallery / "matmul.py")], tmp_path / "c").exit_code == 0
    path = gallery / "matmul.toml"
    doc, _ = draft_of(path)
    doc["kernel"][0]["inputs"] = "reference.py:matmul_inputs"
    path.write_text(dump(doc))
    with pytest.raises(RecipeError) as e:
        load(path)
    assert str(e.value) == (
        f"{path}: [[kernel]] matmul.grid: 'TODO' is a placeholder left by aotc init; fill in "
        "the grid: the host wrapper's launch grid (the kernel object does not hold it), 1 to "
        '3 expressions, e.g. "cdiv(M, BLOCK_M)"'
    )


def test_the_shipped_test_kernels(tmp_path: Path) -> None:
    folder = copy_without_recipes(SHIPPED, tmp_path / "shipped")
    r = invoke(["init", str(folder / "kernels.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, text = draft_of(folder / "kernels.toml")
    names = [k["name"] for k in doc["kernel"]]
    assert names == ["rms", "mm", "consts", "opaque", "blocked", "scaled"]
    rms, mm, consts, opaque, blocked, scaled = doc["kernel"]
    assert "buckets" not in rms and rms["sizes"] == {"n_cols": "TODO"}
    assert rms["space"]["BLOCK_SIZE"] == "TODO"
    assert set(mm["buckets"]) == {"M", "N", "K"} and "space" not in mm and "sizes" not in mm
    for fragment in (
        "# EVEN_K = K % BLOCK_K == 0, from @triton.heuristics",
        '# optional = ["bias_ptr"]',
        '# ACTIVATION = "", its default',
        "# HAS_BIAS = bias_ptr is not None, from @triton.heuristics",
        '# optional = ["scale"]',  # an optional scalar, tested by a rule: no size
        "`args['x_ptr'].dtype.itemsize` has no counterpart in aotc's expressions",
        "by their use, pointers: Y, X, W; sizes: n_cols",
    ):
        assert fragment in text or fragment in flat(text), fragment
    assert opaque["derived"] == {"BLOCK": "TODO"}
    assert set(consts["space"]) == {"SCALE", "FLAG", "MODE", "NOTHING", "OUT_T", "BLOCK",
                                    "num_warps", "num_stages"}  # fmt: skip
    assert blocked["sizes"] == {"n": "TODO", "EM": "TODO"}
    assert scaled["sizes"] == {"n": "TODO"}
    assert "fill in: inputs, grid, sizes.n, derived.BLOCK" in r.stdout

    real = {k["name"]: k for k in tomllib.loads((SHIPPED / "shipped.toml").read_text())["kernel"]}
    reviewed = reviewed_keys(text)
    doc["kernel"] = [fill(k, real[k["name"]], reviewed) if k["name"] in real else k
                     for k in doc["kernel"]]  # fmt: skip
    opaque.update(inputs="reference.py:consts_inputs", grid="1", sizes={"n": 64})
    (folder / "kernels.toml").write_text(dump(doc))
    with pytest.raises(RecipeError) as e:
        load(folder / "kernels.toml")
    assert "[[kernel]] opaque.derived.BLOCK: 'TODO' is a placeholder left by aotc init; fill " in (
        str(e.value)
    )
    assert "fill in derived.BLOCK: an expression computing BLOCK per call" in str(e.value)
    doc["kernel"].remove(opaque)  # not shipped: the person drops it
    doc["bundle"]["targets"] = ["sm_90"]
    (folder / "kernels.toml").write_text(dump(doc))
    plan = make_plan(load(folder / "kernels.toml"))
    assert [k.name for k in plan.recipe.kernels] == ["rms", "mm", "consts", "blocked", "scaled"]


KERNEL_FILE = """
import triton
import triton.language as tl
from kernels import rms_kernel  # imported: drafted by its own file's recipe


@triton.jit
def _scale(x, s):
    return x * s


@triton.jit
def scale_kernel(X, Y, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Y + offs, _scale(tl.load(X + offs, mask=m), s), mask=m)


alias = scale_kernel


def scale(x, y):
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 1024),)](x, y, n, 2.0, BLOCK=1024)
"""


def test_kernels_only_of_this_file_and_no_device_functions(tmp_path: Path) -> None:
    folder = copy_without_recipes(SHIPPED, tmp_path / "k")
    (folder / "scale.py").write_text(KERNEL_FILE)
    out = tmp_path / "elsewhere" / "draft.toml"
    r = invoke(["init", str(folder / "scale.py"), "-o", str(out), "--target", "H100",
                "--target", "sm_80"], tmp_path / "c")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "skipped _scale: a device function" in r.stdout
    doc, text = draft_of(out)
    (kernel,) = doc["kernel"]
    assert kernel["name"] == "scale" and kernel["source"] == "../k/scale.py:scale_kernel"
    assert (out.parent / "../k/scale.py").resolve() == (folder / "scale.py").resolve()
    assert doc["bundle"]["targets"] == ["H100", "sm_80"]
    assert '# grid = "cdiv(n, 1024)"  (from scale())' in text
    assert "pointers: X, Y; sizes: n" in text and "BLOCK" not in kernel["space"]
    # scale() launches it with BLOCK=1024: drafted as that constant, to review
    assert kernel["fixed"]["BLOCK"] == 1024
    assert "fixed.BLOCK = 1024  # TODO: the file's launch passes BLOCK = 1024 (or" in text


ROW_KERNEL = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 4)], key=["D"])
@triton.jit
def row_max(x, z, D: tl.constexpr, B: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, B)
    tl.store(z + i, tl.max(tl.load(x + i * D + o, mask=o < D, other=-float("inf")), 0))
"""


def test_a_constexpr_autotune_key_is_drafted_as_a_per_call_value(tmp_path: Path) -> None:
    """A row width the wrapper passes as a constexpr (FLA's logsumexp keys its autotune on
    it): the draft says how to take it per call rather than fixing it."""
    (tmp_path / "rows.py").write_text(ROW_KERNEL)
    r = invoke(["init", str(tmp_path / "rows.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, text = draft_of(tmp_path / "rows.toml")
    assert "@triton.autotune's key D is a constexpr" in flat(text)
    hint = '# call = { D_ = "shape(ARG, DIM)" }, sizes = { D_ = [...] }, derived = { D = "D_" }'
    assert hint in text
    assert doc["kernel"][0]["fixed"] == {"D": "TODO", "B": "TODO"}


STRIDED_KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_forward(Y, Y_row_stride: tl.constexpr, X, X_row_stride: tl.constexpr, W,
                 W_stride: tl.constexpr, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    o = tl.arange(0, BLOCK_SIZE)
    x = tl.load(X + row * X_row_stride + o, mask=o < n_cols, other=0.0)
    tl.store(Y + row * Y_row_stride + o, x * tl.load(W + o * W_stride), mask=o < n_cols)


def rms(X, W):
    Y = torch.empty_like(X)
    n_rows, n_cols = X.shape
    _rms_forward[(n_rows,)](Y, Y.stride(0), X, X.stride(0), W, 1, n_cols,
                            BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return Y
"""


def test_constexpr_strides_are_drafted_as_stride_call_values(tmp_path: Path) -> None:
    """unsloth's RMS norm takes its row strides as constexprs, launched with X.stride(0):
    the draft reads them per call (stride(X, 0)) rather than fixing a stride that a view
    of a wider tensor would not have; a constexpr named like a stride that the launch
    passes otherwise gets the generic form."""
    (tmp_path / "strided.py").write_text(STRIDED_KERNEL)
    r = invoke(["init", str(tmp_path / "strided.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, text = draft_of(tmp_path / "strided.toml")
    assert ("Constexpr strides: Y_row_stride (rms() passes Y.stride(0)), X_row_stride (rms() "
            "passes X.stride(0)), W_stride. Where the wrapper passes a tensor's t.stride(DIM), "
            "take each per call") in flat(text)  # fmt: skip
    assert ('# call = { Y_row_stride_ = "stride(Y, 0)", X_row_stride_ = "stride(X, 0)", '
            'W_stride_ = "stride(ARG, DIM)" }') in text  # fmt: skip
    assert "# sizes = { Y_row_stride_ = [...], X_row_stride_ = [...], W_stride_ = [...] }" in text
    assert ('# derived = { Y_row_stride = "Y_row_stride_", X_row_stride = "X_row_stride_", '
            'W_stride = "W_stride_" }') in text  # fmt: skip
    assert doc["kernel"][0]["derived"]["X_row_stride"] == "TODO"
    assert (
        "rms() launches the kernel with this constexpr from its own values per call (BLOCK_SIZE"
        in flat(text)
    )


def test_an_existing_recipe_is_kept_without_force(gallery: Path, tmp_path: Path) -> None:
    path = gallery / "softmax.toml"
    path.write_text("# mine\n")
    r = invoke(["init", str(gallery / "softmax.py")], tmp_path / "c")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"{path} exists; pass --force to overwrite it, or -o to write elsewhere" in r.stderr
    assert path.read_text() == "# mine\n"
    r = invoke(["init", str(gallery / "softmax.py"), "--force"], tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert tomllib.loads(path.read_text())["kernel"][0]["name"] == "softmax"
    assert sorted(p.name for p in gallery.glob(".softmax.toml*")) == []  # no temp file left


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("x = 1\n\ndef f():\n    return 2\n", "defines no Triton kernel at module level"),
        (
            "import triton\n\n@triton.jit\ndef helper(x):\n    return x + 1\n",
            "defines no Triton kernel at module level (a @triton.jit function, or one under "
            "@triton.autotune / @triton.heuristics) (skipped helper: a device function",
        ),
        (
            "raise RuntimeError('no GPU here')\n",
            "importing bad.py failed: RuntimeError: no GPU here",
        ),
        (
            "import sys\nsys.exit(3)\n",
            "bad.py called sys.exit(3) while being imported. Importing a kernel file must only "
            "define things",
        ),
    ],
)
def test_a_file_without_kernels_or_that_fails_to_import(
    tmp_path: Path, source: str, message: str
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(source)
    r = invoke(["init", str(bad)], tmp_path / "c")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.startswith(f"aotc: error: {bad}: ") and message in r.stderr
    assert not (tmp_path / "bad.toml").exists()


def test_an_import_failure_reads_as_plan_says_it(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('no GPU here')\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text('[bundle]\nname = "r"\nversion = "1"\ntargets = ["sm_90"]\n[[kernel]]\n'
                      'name = "k"\nsource = "bad.py:k"\ngrid = "1"\n')  # fmt: skip
    planned = invoke(["plan", str(recipe)], tmp_path / "c")
    drafted = invoke(["init", str(bad)], tmp_path / "c")
    said = "importing bad.py failed: RuntimeError: no GPU here"
    assert said in planned.stderr and said in drafted.stderr
    hint = "guard it with torch.cuda.is_available()"  # it reached for a GPU at import
    assert hint in planned.stderr and hint in drafted.stderr


@pytest.mark.parametrize(
    "raised",
    [
        "No device were detected on your machine ! \n Please check that your driver is complete.",
        "0 active drivers ([]). There should only be one.",
    ],
)
def test_a_kernel_librarys_own_device_probe_gets_the_hint_on_one_line(
    tmp_path: Path, raised: str
) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(f"raise RuntimeError({raised!r})\n")
    r = invoke(["init", str(bad)], tmp_path / "c")
    assert r.exit_code == 2 and "guard it with torch.cuda.is_available()" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_an_import_failure_unrelated_to_the_gpu_gets_no_gpu_hint(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("raise ValueError('a typo in the config table')\n")
    r = invoke(["init", str(bad)], tmp_path / "c")
    assert "importing bad.py failed: ValueError: a typo" in r.stderr
    assert "torch.cuda.is_available" not in r.stderr


def test_bad_arguments(tmp_path: Path) -> None:
    r = invoke(["init", str(tmp_path / "missing.py")], tmp_path / "c")
    assert r.exit_code == 2 and "missing.py: no such file" in r.stderr
    r = invoke(["init", str(GALLERY / "softmax.py"), "-o", str(tmp_path / "s.toml"),
                "--target", "H1000"], tmp_path / "c")  # fmt: skip
    assert r.exit_code == 2 and "--target: unknown GPU 'H1000'" in r.stderr
    assert not (tmp_path / "s.toml").exists()
    kernel = tmp_path / "k.py"
    shutil.copy(GALLERY / "softmax.py", kernel)
    r = invoke(["init", str(kernel), "-o", str(kernel), "--force"], tmp_path / "c")
    assert r.exit_code == 2 and "is the kernel file itself; name a .toml file" in r.stderr
    assert kernel.read_text() == (GALLERY / "softmax.py").read_text()


CONSTS = (
    'format = 1\n[bundle]\nname = "c"\nversion = "1"\ntargets = ["sm_90"]\n[[kernel]]\n'
    'name = "k"\nsource = "kernels.py:consts_kernel"\n'
    'signature = { out_ptr = "*fp32", n = "i32" }\nbuckets = { n = [1024] }\n'
)
FIXED = 'fixed = { SCALE = 0.5, FLAG = true, NOTHING = "None", OUT_T = "tl.float32" }\n'


@pytest.mark.parametrize(
    ("rest", "fragments"),
    [
        ('grid = "TODO"\n', ["[[kernel]] k.grid: 'TODO' is a placeholder", "fill in the grid"]),
        (
            'grid = "1"\nsizes = { m = "TODO" }\n',
            ["k.sizes.m: 'TODO' is a placeholder", "fill in sizes.m: a representative value of m"],
        ),
        (
            'grid = "1"\nspace = { BLOCK = [64, " TODO"] }\n',
            ["k.space.BLOCK[1]: ' TODO' is a placeholder", "fill in space.BLOCK: a list of values"],
        ),
        (
            'grid = "TODO"\ncall = { rows = "TODO" }\n',
            ["k.grid: 'TODO'", "(also to fill in: k.call.rows)"],
        ),
        # A string that merely starts with the letters is a value like any other.
        ('grid = "1"\nspace = { BLOCK = [64] }\n' + FIXED[:-3] + ', MODE = "TODO_X" }\n', []),
    ],
)
def test_placeholders_are_named_with_what_to_fill_in(
    tmp_path: Path, rest: str, fragments: list[str]
) -> None:
    folder = copy_without_recipes(SHIPPED, tmp_path / "k")
    recipe = folder / "c.toml"
    recipe.write_text(CONSTS + rest + ("" if "MODE" in rest else FIXED))
    expect_recipe(recipe, fragments)


HOOKS_FILE = """
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=4), triton.Config({}, num_warps=8)],
                 key=["n"])
@triton.jit
def warps_kernel(x_ptr, n, BLOCK: tl.constexpr = 128):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)


def _zero(nargs):
    nargs["x_ptr"].zero_()


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=4, pre_hook=_zero),
                          triton.Config({"BLOCK": 128}, num_warps=4, pre_hook=_zero)],
                 key=["n"])
@triton.jit
def hooked_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)
"""


def test_autotune_configs_aotc_cannot_take_become_a_space_to_review(tmp_path: Path) -> None:
    (tmp_path / "hooks.py").write_text(HOOKS_FILE)
    r = invoke(["init", str(tmp_path / "hooks.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, text = draft_of(tmp_path / "hooks.toml")
    warps, hooked = doc["kernel"]
    # Configs that set only launch options are the search space all the same.
    assert "space" not in warps and "@triton.autotune's 2 configs (num_warps, num_stages)" in (
        flat(text)
    )
    assert "# BLOCK = 128, its default" in text
    assert "has a pre_hook or post_hook (host code aotc cannot run)" in flat(text)
    assert hooked["space"] == {"BLOCK": [64, 128], "num_warps": [4, 8], "num_stages": [3]}
    assert "check: dtypes, buckets, space.BLOCK, space.num_warps, space.num_stages" in r.stdout


VARIABLE_LAUNCHES = """
import triton
import triton.language as tl


@triton.jit
def rms_kernel(Y, Y_row_stride: tl.constexpr, X, X_row_stride: tl.constexpr,
               n_cols: tl.constexpr, eps: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(X + row * X_row_stride + offs, mask=offs < n_cols, other=0.0)
    y = x * tl.math.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * Y_row_stride + offs, y, mask=offs < n_cols)


@triton.jit
def gemma_kernel(Y, Y_row_stride: tl.constexpr, X, X_row_stride: tl.constexpr,
                 n_cols: tl.constexpr, eps: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(X + row * X_row_stride + offs, mask=offs < n_cols, other=0.0)
    tl.store(Y + row * Y_row_stride + offs, x + eps, mask=offs < n_cols)


@triton.jit
def tiled_kernel(a, c, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c + offs, tl.load(a + offs, mask=offs < n_cols), mask=offs < n_cols)


@triton.jit
def flat_kernel(a, c, n, OUT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c + offs, tl.load(a + offs, mask=offs < n).to(OUT), mask=offs < n)


def norm(X, eps, gemma=False):
    n_rows, n_cols = X.shape
    Y = X.new_empty(X.shape)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    fx = gemma_kernel if gemma else rms_kernel
    with open("/dev/null"):
        fx[(n_rows,)](Y, Y.stride(0), X, X.stride(0), n_cols, eps, BLOCK_SIZE=BLOCK_SIZE,
                      num_warps=8)
    return Y


def copy(a, c, n_rows, n_cols, n):
    grid = None
    if n_cols > 4096:
        grid = (n_rows, triton.cdiv(n_cols, 1024))
        with open("/dev/null"):
            tiled_kernel[grid](a, c, n_cols, BLOCK=1024)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    flat_kernel[grid](a, c, n, OUT=c.dtype, BLOCK=256)
"""


def test_a_launch_through_a_variable_gets_its_grid_and_per_call_constexprs(
    tmp_path: Path,
) -> None:
    """The grid comes out as for a direct ``kernel[(n_rows,)]`` launch where the wrapper
    launches through a local (unsloth's ``fx = A if gemma else B; fx[(n_rows,)](...)``) or
    names a grid assigned in a block (Liger's tiled swiglu); and the constexprs the wrapper
    passes from its own values (strides, the row width, eps) are drafted as derived, with
    the call + derived pattern, instead of a space to search."""
    (tmp_path / "norms.py").write_text(VARIABLE_LAUNCHES)
    r = invoke(["init", str(tmp_path / "norms.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, text = draft_of(tmp_path / "norms.toml")
    rms, gemma, tiled, flat_ = doc["kernel"]
    for k in (rms, gemma):
        name = k["name"]
        part = text.split(f'name = "{name}"')[1].split("[[kernel]]")[0]
        assert '# grid = "n_rows"  (from norm())' in part, name
        assert (
            "norm() launches the kernel with these constexprs from its own values per call "
            "(n_cols = n_cols, eps = eps, BLOCK_SIZE = BLOCK_SIZE): give each in derived "
            "rather than search it"
        ) in flat(part)
        # the strides get their own note: a stride(ARG, DIM) call value each
        assert '# call = { Y_row_stride_ = "stride(Y, 0)", X_row_stride_ = "stride(X, 0)"' in part
        hint = '# call = { n_cols_ = "shape(ARG, DIM)" } (or "keyword"), sizes = { n_cols_ = '
        assert hint + '[...] }, derived = { n_cols = "n_cols_" }' in part
        assert "A float (an eps, say) cannot be a call value: give it in fixed" in flat(part)
        assert k["derived"] == dict.fromkeys(
            ["Y_row_stride", "X_row_stride", "n_cols", "eps", "BLOCK_SIZE"], "TODO"
        )
        assert set(k["space"]) == {"num_warps", "num_stages"}
    assert '# grid = ["n_rows", "cdiv(n_cols, 1024)"]  (from copy())' in text
    assert '# grid = "cdiv(n, BLOCK)"  (from copy())' in text
    # A literal constexpr (BLOCK=1024) is no per-call value: drafted as the value launched.
    assert tiled["fixed"] == {"BLOCK": 1024} and "derived" not in tiled
    assert flat_["fixed"] == {"BLOCK": 256} and flat_["derived"] == {"OUT": "TODO"}
    assert "BLOCK" not in tiled["space"] and "BLOCK" not in flat_["space"]
    assert "OUT follows a tensor's element type: give it in fixed as the name of its dtype " in (
        flat(text)
    )


def test_an_import_failure_in_the_packages_init_names_it(tmp_path: Path) -> None:
    """A kernel library's file is imported as its package's module, so Python runs the
    package's __init__.py first (unsloth's imports its whole training stack): a failure
    there names the files it passed through and says why the __init__.py ran, for init
    and plan alike, rather than blaming the kernel file."""
    ops = tmp_path / "lib" / "ops"
    ops.mkdir(parents=True)
    (tmp_path / "lib" / "__init__.py").write_text("from . import heavy\n")
    (tmp_path / "lib" / "heavy.py").write_text("x = 1\nimport not_installed_here\n")
    (ops / "__init__.py").write_text("")
    (ops / "norm.py").write_text("import triton\n")
    recipe = tmp_path / "r.toml"
    recipe.write_text('[bundle]\nname = "r"\nversion = "1"\ntargets = ["sm_90"]\n[[kernel]]\n'
                      'name = "k"\nsource = "lib/ops/norm.py:k"\ngrid = "1"\n')  # fmt: skip
    drafted = invoke(["init", str(ops / "norm.py")], tmp_path / "c")
    planned = invoke(["plan", str(recipe)], tmp_path / "c")
    init = tmp_path / "lib" / "__init__.py"
    for r in (drafted, planned):
        assert r.exit_code == 2 and "Traceback" not in r.output
        assert (
            "importing norm.py failed: ModuleNotFoundError: No module named "
            f"'not_installed_here' (raised at {tmp_path / 'lib' / 'heavy.py'}:2 < {init}:1; "
            f"Python runs {init} first, the package's __init__.py, to import norm.py as a "
            "module of the package: what it imports must be importable where aotc runs"
        ) in " ".join(r.stderr.split())


def test_an_import_failure_in_a_helper_names_where(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("\n\nraise ValueError('bad table')\n")
    bad = tmp_path / "bad.py"
    bad.write_text("import helper\n")
    r = invoke(["init", str(bad)], tmp_path / "c")
    said = f"ValueError: bad table (raised at {tmp_path / 'helper.py'}:3 < {bad}:1)"
    assert said in r.stderr and "__init__" not in r.stderr


MODULE_CONSTANT = """
import triton
import triton.language as tl

BLOCK_SIZE = 1024
WIDE = 4096


@triton.jit
def fg_kernel(e, h, n, BLOCK_SIZE: tl.constexpr, WIDE_BLOCK: tl.constexpr, ACT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(h + offs, tl.load(e + offs, mask=offs < n), mask=offs < n)


def fg(e, h, WIDE=2048):
    n = e.numel()
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
    fg_kernel[grid](e, h, n, BLOCK_SIZE=BLOCK_SIZE, WIDE_BLOCK=WIDE, ACT=None)
"""


def test_a_module_constant_passed_by_the_wrapper_is_drafted_as_its_value(tmp_path: Path) -> None:
    """unsloth's swiglu_fg_kernel launches with ``BLOCK_SIZE = BLOCK_SIZE``, the module's
    1024: the draft gives it in fixed with that value (the grid reads it), not as a value
    taken per call; a name the wrapper binds itself (its parameter WIDE) stays per call."""
    (tmp_path / "fg.py").write_text(MODULE_CONSTANT)
    r = invoke(["init", str(tmp_path / "fg.py")], tmp_path / "c")
    assert r.exit_code == 0, r.output
    doc, text = draft_of(tmp_path / "fg.toml")
    (k,) = doc["kernel"]
    assert k["fixed"] == {"BLOCK_SIZE": 1024} and k["derived"] == {"WIDE_BLOCK": "TODO"}
    assert k["space"]["ACT"] == "TODO"  # a None TOML cannot hold as such: left to be given
    assert "the file's launch passes BLOCK_SIZE = BLOCK_SIZE, the module's 1024" in text
    assert '# grid = "cdiv(n, BLOCK_SIZE)"  (from fg())' in text
