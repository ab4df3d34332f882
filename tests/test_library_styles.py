"""Kernels in styles that kernel libraries ship (Liger-Kernel's KL divergence, cross
entropy and rotary embedding), each reduced to a few lines: built on the CPU, drafted by
``aotc init`` and called on the fake driver, as a new user would."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import loader
from aot.build import TuneOptions, build
from aot.cli.commands import cli
from aot.plan import make_plan
from aot.recipe import load
from tests.fakecuda import FakeLib, FakeTensor

from .conftest import env_for

# A module-level constant reused as a constexpr's default, as Liger's kl_div.py does
# (_REDUCTION_MODE_BATCHMEAN: tl.constexpr = tl.constexpr(3)).
MODE_KERNEL = """
import triton
import triton.language as tl

MODE_SUM: tl.constexpr = tl.constexpr(1)


@triton.jit
def rows_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, MODE: tl.constexpr = MODE_SUM):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    if MODE == 1:
        tl.store(out_ptr + row, tl.sum(x, axis=0))
    else:
        tl.store(out_ptr + row, tl.max(x, axis=0))


def rows(x):
    out = x.new_empty(x.shape[0])
    rows_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
"""

MODE_RECIPE = """
format = 1
[bundle]
name = "rows"
version = "0.1"
targets = ["sm_90"]
[[kernel]]
name = "rows"
source = "k.py:rows_kernel"
signature = { x_ptr = "*fp32", out_ptr = "*fp32", n_cols = "i32" }
grid = "n_rows"
call = { n_rows = "shape(x_ptr, 0)" }
buckets = { n_rows = [16, 1024] }
sizes = { n_cols = 1000 }
derived = { BLOCK = "next_power_of_2(n_cols)" }
"""


def build_here(tmp_path: Path, kernel: str, recipe: str) -> Path:
    (tmp_path / "k.py").write_text(kernel)
    (tmp_path / "r.toml").write_text(recipe)
    out = tmp_path / "r.aotc"
    build(tmp_path / "r.toml", out, env_for(tmp_path / "cache"), tmp_path,
          TuneOptions(enabled=False, db=tmp_path / "db.jsonl"))  # fmt: skip
    return out


def test_a_constexpr_default_given_as_a_tl_constexpr_is_its_value(
    tmp_path: Path, fake: FakeLib
) -> None:
    """``MODE: tl.constexpr = MODE_SUM``, a ``tl.constexpr(1)``, is the default 1: the plan
    used to refuse it ("constexpr MODE has no value"), and aotc init drafted
    "constexpr[1]"."""
    out = build_here(tmp_path, MODE_KERNEL, MODE_RECIPE)
    assert load(tmp_path / "r.toml").kernels[0].fixed["MODE"] == 1
    rows = loader.open(out)["rows"]
    x = FakeTensor(0x1000, "torch.float32", shape=(8, 1000))
    assert (
        rows.variant_for(x, FakeTensor(0x2000, "torch.float32", shape=(8,)), 1000).meta["MODE"] == 1
    )
    drafted = CliRunner().invoke(cli, ["init", str(tmp_path / "k.py"), "-o",
                                       str(tmp_path / "d.toml")])  # fmt: skip
    assert drafted.exit_code == 0, drafted.output
    text = (tmp_path / "d.toml").read_text()
    assert "# MODE = 1, its default" in text and "constexpr[" not in text


def test_a_default_aotc_cannot_record_is_named_with_the_fix(tmp_path: Path) -> None:
    """A default that is no integer, float, boolean, string, None or dtype (an object of
    the author's) cannot travel in a bundle: the plan names it and says to give the
    constexpr in fixed, rather than that it has no value."""
    kernel = MODE_KERNEL.replace("MODE_SUM: tl.constexpr = tl.constexpr(1)",
                                 "MODE_SUM = object()")  # fmt: skip
    (tmp_path / "k.py").write_text(kernel)
    (tmp_path / "r.toml").write_text(MODE_RECIPE)
    with pytest.raises(Exception, match=r"rows\.fixed.*MODE.*default.*object.*fixed"):
        make_plan(load(tmp_path / "r.toml"))


def test_a_call_by_keyword_as_the_librarys_wrapper_launches(tmp_path: Path, fake: FakeLib) -> None:
    """Liger launches its cross entropy by keyword (``kernel[grid](X_ptr=x, ...,
    reduction=reduction, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)``); the same call of
    the bundle's kernel used to be refused as "takes 3 arguments, got 0". Arguments by
    keyword now take their places; a constexpr or launch option given is checked against
    what the variant that runs has, and refused with the value the bundle holds."""
    rows = loader.open(build_here(tmp_path, MODE_KERNEL, MODE_RECIPE))["rows"]
    x, out = (
        FakeTensor(0x1000, "torch.float32", shape=(8, 1000)),
        FakeTensor(0x2000, "torch.float32", shape=(8,)),
    )
    rows(x, out, 1000)
    rows(x_ptr=x, out_ptr=out, n_cols=1000)
    rows(x, n_cols=1000, out_ptr=out, MODE=1, BLOCK=1024)
    warps = rows.variant_for(x, out, 1000).num_warps
    rows(x, out, 1000, num_warps=warps)
    assert len({(lo.function, tuple(lo.params)) for lo in fake.launches}) == 1
    assert len(fake.launches) == 4
    refusals = [
        ({"x_ptr": x, "out_ptr": out}, r"missing argument 'n_cols' \(it takes x_ptr, out_ptr"),
        ({"x_ptr": x, "out_ptr": out, "n_cols": 1000, "MODE": 2},
         r"got MODE=2, and every variant in the bundle was built with MODE = 1 .*fixed\.MODE = 2"),
        ({"x_ptr": x, "out_ptr": out, "n_cols": 1000, "BLOCK": 2048},
         r"got BLOCK=2048, and the variant .* has BLOCK = 1024 \(the recipe derives it"),
        ({"x_ptr": x, "out_ptr": out, "n_cols": 1000, "num_warps": warps * 2},
         rf"num_warps = {warps} \(the build chose it for this bucket\)"),
        ({"x_ptr": x, "out_ptr": out, "n_cols": 1000, "MODE": True}, r"built with MODE = 1"),
    ]  # fmt: skip
    for call, match in refusals:
        with pytest.raises(loader.ArgumentError, match=match):
            rows(**call)
    with pytest.raises(loader.ArgumentError, match="multiple values for argument 'x_ptr'"):
        rows(x, out, 1000, x_ptr=x)
    with pytest.raises(loader.ArgumentError, match="unexpected keyword 'n_row'"):
        rows(x, out, 1000, n_row=8)
    assert len(fake.launches) == 4
