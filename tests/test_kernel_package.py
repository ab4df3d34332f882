"""A kernel file inside a package (a kernel library's ``ops/``) builds as its users import
it: its relative and absolute imports of the package's other modules work."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from aot import kernelfile
from aot.plan import make_plan
from aot.recipe import load
from aot.summary import describe_plan

UTILS = """
import triton
import triton.language as tl


@triton.jit
def silu(x):
    return x * tl.sigmoid(x)


def settings(n):
    return triton.next_power_of_2(n)
"""

OPS = """
import triton
import triton.language as tl

from .utils import silu
from {pkg}.utils import settings


@triton.jit
def swiglu(a_ptr, b_ptr, c_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(a_ptr + row * n_cols + cols, mask=mask, other=0).to(tl.float32)
    b = tl.load(b_ptr + row * n_cols + cols, mask=mask, other=0)
    tl.store(c_ptr + row * n_cols + cols, silu(a).to(b.dtype) * b, mask=mask)
"""

RECIPE = """
format = 1
[bundle]
name = "pkg"
version = "1"
targets = ["sm_90"]

[[kernel]]
name = "swiglu"
source = "{pkg}/ops/swiglu.py:swiglu"
grid = "rows"
call = {{ rows = "keyword" }}
signature = {{ a_ptr = "*fp16", b_ptr = "*fp16", c_ptr = "*fp16", n_cols = "i32" }}
buckets = {{ rows = [1, 64] }}
sizes = {{ n_cols = 4096 }}
fixed = {{ BLOCK = 4096 }}
"""


def _package(root: Path, pkg: str) -> Path:
    """root/pkg/{__init__,utils}.py and root/pkg/ops/{__init__,swiglu}.py."""
    (root / pkg / "ops").mkdir(parents=True)
    (root / pkg / "__init__.py").write_text("")
    (root / pkg / "ops" / "__init__.py").write_text("")
    (root / pkg / "utils.py").write_text(UTILS)
    (root / pkg / "ops" / "swiglu.py").write_text(OPS.replace("{pkg}", pkg).replace(
        "from .utils", "from ..utils"))  # fmt: skip
    return root / pkg / "ops" / "swiglu.py"


@pytest.fixture
def clean_imports() -> Iterator[None]:
    """The packages these tests import leave neither sys.modules nor sys.path changed."""
    path = list(sys.path)
    yield
    for name in [n for n in sys.modules if n.startswith(("kernlib_", "helper"))]:
        del sys.modules[name]
    sys.path[:] = path
    kernelfile._modules.clear()


def test_a_kernel_in_a_package_imports_its_package_relatively_and_absolutely(
    tmp_path: Path, clean_imports: None
) -> None:
    ops = _package(tmp_path, "kernlib_a")
    mod = kernelfile.load_module(ops)
    assert mod.__name__ == "kernlib_a.ops.swiglu"
    assert mod.settings(1000) == 1024  # the absolute import of the package's module
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(pkg="kernlib_a"))
    text = describe_plan(make_plan(load(recipe)))
    assert "kernel swiglu (kernlib_a/ops/swiglu.py:swiglu" in text


def test_another_copy_of_the_package_imported_already_is_refused(
    tmp_path: Path, clean_imports: None
) -> None:
    ours = _package(tmp_path / "ours", "kernlib_b")
    _package(tmp_path / "installed", "kernlib_b")
    sys.path.insert(0, str(tmp_path / "installed"))
    __import__("kernlib_b.ops.swiglu")  # imported before, from the other copy
    with pytest.raises(kernelfile.KernelImportError, match="another kernlib_b was imported first"):
        kernelfile.load_module(ours)


def test_a_file_outside_any_package_still_runs_as_its_own_module(
    tmp_path: Path, clean_imports: None
) -> None:
    (tmp_path / "helper.py").write_text("VALUE = 7\n")
    (tmp_path / "k.py").write_text("import helper\nVALUE = helper.VALUE\n")
    mod = kernelfile.load_module(tmp_path / "k.py")
    assert mod.VALUE == 7 and mod.__name__.startswith("aotc_src_")
