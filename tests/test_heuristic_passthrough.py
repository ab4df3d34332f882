"""A ``@triton.heuristics`` rule that only hands back the caller's own constexpr
(unsloth's ``"GEMMA": lambda args: bool(args["GEMMA"])``): no expression of the other
arguments computes it, so ``aotc init``, ``aotc plan`` and the build say the same thing:
give the value in ``fixed``, or take it per call from a keyword call value (both values
built). Searching it in ``space`` is refused: the build would pick the caller's choice by
speed. ``aotc init`` and the plan used to say "it calls `bool`" and ask for an expression.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import loader
from aot.build import build
from aot.errors import RecipeError
from aot.init import draft
from aot.plan import make_plan
from aot.recipe import load
from loader.errors import ArgumentError
from tests.conftest import env_for
from tests.fakecuda import FakeLib
from tests.test_descriptors import Tensor

KERNEL = """
import triton
import triton.language as tl


@triton.heuristics({
    "GEMMA": lambda args: bool(args["GEMMA"]),
    "MODE": lambda args: args["MODE"],
    "HAS_W": lambda args: bool(args["W"]),
})
@triton.jit
def norm_kernel(X, W, n, GEMMA: tl.constexpr, MODE: tl.constexpr, HAS_W: tl.constexpr,
                BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    if GEMMA:
        x = x + MODE
    tl.store(X + offs, x, mask=offs < n)
"""

RECIPE = """
format = 1
[bundle]
name = "norm"
version = "0.1.0"
targets = ["sm_90"]

[[kernel]]
name = "norm"
source = "norm.py:norm_kernel"
signature = { X = "*fp32", W = "i32", n = "i32" }
grid = "cdiv(n, BLOCK)"
buckets = { n = [1024, 4096] }
fixed = { BLOCK = 1024, MODE = 1, HAS_W = false }
"""

GEMMA_FIX = (
    "passes the caller's own GEMMA through (bool(args['GEMMA'])): GEMMA is what the caller "
    "launches with. Give the value the callers use in fixed, fixed = { GEMMA = false } (one "
    "[[kernel]] entry per value), or take it per call with both values built: call = { GEMMA_ "
    '= "keyword" }, sizes = { GEMMA_ = 1 }, derived = { GEMMA = "GEMMA_ != 0" } (the caller '
    "passes GEMMA_=0 or GEMMA_=1)"
)
PER_CALL = """
call = { GEMMA_ = "keyword" }
sizes = { GEMMA_ = 1 }
derived = { GEMMA = "GEMMA_ != 0" }
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "norm.py").write_text(KERNEL)
    return tmp_path


def flat(text: str) -> str:
    return " ".join(line.removeprefix("# ").strip() for line in text.splitlines())


def test_init_says_the_value_is_the_callers_and_how_to_give_it(folder: Path) -> None:
    text = draft(folder / "norm.py").text
    assert f"GEMMA's @triton.heuristics rule {GEMMA_FIX}." in flat(text)
    assert (
        "MODE's @triton.heuristics rule passes the caller's own MODE through (args['MODE']): "
        "MODE is what the caller launches with. Give the value the callers use in fixed, fixed "
        "= { MODE = ... } (one [[kernel]] entry per value), or take it per call, one variant "
        'per listed value: call = { MODE_ = "keyword" }, sizes = { MODE_ = [...] }, derived = '
        '{ MODE = "MODE_" }'
    ) in flat(text)
    # A rule that reads another argument is no pass-through: it still asks for an expression.
    assert "HAS_W comes from a @triton.heuristics rule that cannot be translated: it calls " in (
        flat(text)
    )
    for name in ("GEMMA", "MODE", "HAS_W"):
        assert f'derived.{name} = "TODO"' in text


def write(folder: Path, extra: str, fixed: str = "BLOCK = 1024, MODE = 1, HAS_W = false") -> Path:
    path = folder / "norm.toml"
    path.write_text(RECIPE.replace("BLOCK = 1024, MODE = 1, HAS_W = false", fixed) + extra)
    return path


def test_the_plan_says_the_same_when_the_recipe_gives_no_value(folder: Path) -> None:
    with pytest.raises(RecipeError) as e:
        load(write(folder, ""))
    assert str(e.value) == (
        f"{folder / 'norm.toml'}: [[kernel]] norm.derived.GEMMA: the @triton.heuristics rule "
        f"for GEMMA of norm_kernel {GEMMA_FIX}"
    )


def test_searching_the_callers_value_is_refused(folder: Path) -> None:
    with pytest.raises(RecipeError) as e:
        load(write(folder, "space = { GEMMA = [false, true] }\n"))
    assert "[[kernel]] norm.space.GEMMA: the @triton.heuristics rule for GEMMA of norm_kernel " in (
        str(e.value)
    )
    assert "launches with, not a value the build may choose: searching it would pick one for " in (
        str(e.value)
    )


def test_a_fixed_value_replaces_the_rule(folder: Path) -> None:
    kr = load(write(folder, "", "BLOCK = 1024, MODE = 1, HAS_W = false, GEMMA = true")).kernels[0]
    assert kr.fixed["GEMMA"] is True and "GEMMA" not in kr.heuristics


def test_the_per_call_route_builds_both_values_and_the_caller_picks(
    folder: Path, fake: FakeLib
) -> None:
    path = write(folder, PER_CALL)
    (inst,) = make_plan(load(path)).instances
    assert "GEMMA" in inst.kernel.derived and "GEMMA" not in inst.kernel.heuristics
    out = folder / "norm.aotc"
    build(path, out, env_for(folder / "cache"), folder)
    kernel = loader.open(out)["norm"]
    x = Tensor(0x100000, (2000,), dtype="torch.float32")
    assert kernel.variant_for(x, 0, 2000, GEMMA_=0).meta["GEMMA"] is False
    assert kernel.variant_for(x, 0, 2000, GEMMA_=1).meta["GEMMA"] is True
    with pytest.raises(ArgumentError, match=r"GEMMA is derived: GEMMA = GEMMA_ != 0\); pass "
                       r"GEMMA_=\.\.\. instead"):  # fmt: skip
        kernel.variant_for(x, 0, 2000, GEMMA=True)
