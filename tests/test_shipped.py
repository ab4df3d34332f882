"""Kernels as their authors ship them (issue 18), built on the CPU and dispatched on the
fake driver: the signature inferred, ``@triton.autotune``'s configs as the search space
and its pruning per bucket, ``@triton.heuristics`` rules as per-call values, optional
pointers, every kind of constexpr, launch values that are no arguments, and no call ever
run by a variant the build did not make for it."""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

import loader
from aot.build import TuneOptions, build
from aot.errors import RecipeError
from aot.plan import make_plan
from aot.recipe import load
from aot.summary import describe_plan
from tests.fakecuda import FakeLib, FakeTensor

from .conftest import env_for

DATA = Path(__file__).parent / "data" / "shipped"


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shipped recipe built once, on this CPU (the heuristic picks)."""
    root = tmp_path_factory.mktemp("shipped")
    out = root / "shipped.aotc"
    build(DATA / "shipped.toml", out, env_for(root / "cache"), root,
          TuneOptions(enabled=False, db=root / "db.jsonl"))  # fmt: skip
    return out


def T(addr: int, *shape: int, dtype: str = "torch.float16") -> FakeTensor:
    return FakeTensor(addr, dtype, shape=shape)


def rms_args(rows: int, cols: int, dtype: str = "torch.float16") -> list[object]:
    x = T(0x1000, rows, cols, dtype=dtype)
    return [T(0x2000, rows, cols, dtype=dtype), x, T(0x3000, cols, dtype=dtype), cols, cols, 1e-6]


def mm_args(m: int, k: int = 1024, bias: bool = True) -> list[object]:
    n = 1024
    b = T(0x4000, n) if bias else None
    return [T(0x1000, m, k), T(0x2000, k, n), T(0x3000, m, n), b, m, n, k, k, 1, n, 1, n, 1]


def test_the_signature_is_inferred_and_the_plan_says_so() -> None:
    recipe = load(DATA / "shipped.toml")
    rms = recipe.kernels[0]
    assert dict(rms.signature) == {"Y": "*T", "X": "*T", "W": "*T", "stride": "i32",
                                   "n_cols": "i32", "eps": "fp32"}  # fmt: skip
    text = describe_plan(make_plan(recipe))
    assert "signature: Y: *T*, X: *T*, W: *T*, stride: i32*" in text
    assert "(* inferred from inputs)" in text
    assert "call values: n_rows = shape(X, 0)" in text
    assert "search space: 3 configs (@triton.autotune's configs)" in text
    assert "per call: EVEN_K = K % BLOCK_K == 0 (@triton.heuristics)" in text
    assert "optional (built as passed and as None): bias_ptr" in text


def test_the_plan_names_a_pointer_inputs_always_passes_as_none(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    ref = tmp_path / "reference.py"
    passed = ref.read_text().replace("        bias,\n        M,", "        None,\n        M,", 1)
    ref.write_text(passed)
    recipe = tmp_path / "shipped.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace('optional = ["bias_ptr"]\n', "", 1))
    plan = describe_plan(make_plan(load(recipe)))
    mm = plan[plan.index("kernel mm ") :]
    always = "arguments inputs always passes as None (compiled in as None; a call must pass None)"
    assert f"{always}: bias_ptr\n" in mm
    assert "optional pointers" not in mm.split("\n\n")[0]


def test_a_value_for_a_pointer_compiled_in_as_none_is_refused(
    tmp_path: Path, fake: FakeLib
) -> None:
    """A pointer ``inputs`` always passed as None is compiled in as None: a call that
    passes something for it (a tensor, or a float where the author's argument is an
    optional scalar such as a scale) is refused saying so, and how to rebuild."""
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    ref = tmp_path / "reference.py"
    ref.write_text(
        ref.read_text().replace("        bias,\n        M,", "        None,\n        M,", 1)
    )
    recipe = tmp_path / "shipped.toml"
    recipe.write_text(recipe.read_text().replace('optional = ["bias_ptr"]\n', "", 1))
    out = tmp_path / "none.aotc"
    build(recipe, out, env_for(tmp_path / "cache"), tmp_path,
          TuneOptions(enabled=False, db=tmp_path / "db.jsonl"))  # fmt: skip
    mm = loader.open(out)["mm"]
    mm(*mm_args(64, bias=False))
    with pytest.raises(loader.ArgumentError, match="'bias_ptr' is compiled in as None"):
        mm(*mm_args(64))
    assert len(fake.launches) == 1


def test_autotune_configs_are_the_space_and_its_pruning_runs_per_bucket() -> None:
    plan = make_plan(load(DATA / "shipped.toml"))
    mm = next(i for i in plan.instances if i.kernel.name == "mm")
    assert len(mm.configs) == 3
    small = {dict(c.meta)["BLOCK_M"] for c in mm.candidates((16,))}
    assert small == {32}  # the author's early_config_prune: BLOCK_M <= max(32, M)
    assert len(mm.candidates((1024,))) == 3


def test_a_heuristic_that_cannot_be_translated_names_the_key_that_replaces_it(
    tmp_path: Path,
) -> None:
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "opaque.toml"
    path.write_text(
        'format = 1\n[bundle]\nname = "o"\nversion = "1"\ntargets = ["sm_90"]\n'
        '[[kernel]]\nname = "o"\nsource = "kernels.py:opaque_kernel"\n'
        'signature = { x_ptr = "*fp16", n = "i32" }\ngrid = "1"\nbuckets = { n = [64] }\n'
    )
    with pytest.raises(RecipeError) as e:
        load(path)
    msg = str(e.value)
    assert "[[kernel]] o.derived.BLOCK" in msg and "cannot be translated" in msg
    assert "args['x_ptr'].dtype.itemsize" in msg and 'derived.BLOCK = "<expression>"' in msg
    path.write_text(path.read_text() + 'derived = { BLOCK = "64" }\n')
    assert load(path).kernels[0].derived["BLOCK"].text == "64"


def test_a_derived_constexpr_is_dispatched_per_call_and_never_run_unbuilt(
    shipped: Path, fake: FakeLib
) -> None:
    rms = loader.open(shipped)["rms"]
    assert rms.variant_for(*rms_args(1, 1024)).meta["BLOCK_SIZE"] == 1024
    assert rms.variant_for(*rms_args(7, 4096)).meta["BLOCK_SIZE"] == 4096
    # Between the listed sizes and past the buckets: still the value the rule gives.
    assert rms.variant_for(*rms_args(300, 1000)).meta["BLOCK_SIZE"] == 1024
    assert rms.variant_for(*rms_args(16, 3000)).meta["BLOCK_SIZE"] == 4096
    with pytest.raises(loader.ArgumentError) as e:
        rms(*rms_args(16, 2048))
    msg = str(e.value)
    assert "BLOCK_SIZE = next_power_of_2(n_cols) is 2048 at this call" in msg
    assert "BLOCK_SIZE in {1024, 4096}" in msg and "n_cols=2048" in msg
    assert fake.launches == []
    for rows in (1, 5, 300):  # the launch grid reads the call value n_rows = shape(X, 0)
        rms(*rms_args(rows, 1024))
    assert [launch.grid for launch in fake.launches] == [(1, 1, 1), (5, 1, 1), (300, 1, 1)]
    rms(*rms_args(9, 1024), n_rows=3)  # a call value may be passed by keyword too
    assert fake.launches[-1].grid == (3, 1, 1)


def test_heuristic_values_optional_pointers_and_string_constexprs(
    shipped: Path, fake: FakeLib
) -> None:
    mm = loader.open(shipped)["mm"]
    even = mm.variant_for(*mm_args(16, k=1024))
    odd = mm.variant_for(*mm_args(16, k=1000))  # EVEN_K is built both ways
    assert (even.meta["EVEN_K"], odd.meta["EVEN_K"]) == (True, False)
    assert even.meta["ACTIVATION"] == "relu"
    with_bias, without = mm.variant_for(*mm_args(64)), mm.variant_for(*mm_args(64, bias=False))
    assert "bias_ptr" in with_bias.abi and "bias_ptr" not in without.abi
    for _ in range(3):  # through the fast path too
        mm(*mm_args(64, bias=False))
        mm(*mm_args(64))
    assert len(fake.launches) == 6
    with pytest.raises(loader.ArgumentError, match="unexpected keyword 'junk'"):
        mm(*mm_args(64), junk=1)
    got = mm.launch_config(dtypes={"bias_ptr": "none"}, M=100, K=1000)
    assert got["EVEN_K"] is False and got["BLOCK_M"] in (32, 64, 128) and "num_warps" in got


def test_every_constexpr_kind_compiles(shipped: Path, fake: FakeLib) -> None:
    consts = loader.open(shipped)["consts"]
    meta = consts.variant_for(T(0x1000, 1024, dtype="torch.float32"), 1024).meta
    assert meta == {"SCALE": 0.5, "FLAG": True, "MODE": "neg", "NOTHING": None,
                    "OUT_T": "tl.float32", "BLOCK": 256}  # fmt: skip


def blocked_args(n: int, em: int, bias: bool = True, dtype: str = "torch.float16") -> list[object]:
    b = T(0x2000, n, dtype=dtype) if bias else None
    return [T(0x1000, n, dtype=dtype), b, T(0x3000, em, dtype=dtype), n, em]


def test_host_values_are_pinned_and_none_tests_become_per_call_values(
    shipped: Path, fake: FakeLib
) -> None:
    blocked = loader.open(shipped)["blocked"]
    cfg = blocked.launch_config(dtypes={"T": "fp16", "bias_ptr": "given"}, n=50)
    block = cfg["BLOCK_M"]
    with pytest.raises(
        loader.ArgumentError, match=re.escape("needs BLOCK_M=..., the value the host data")
    ):
        blocked(*blocked_args(50, 64))
    v = blocked.variant_for(*blocked_args(50, 64), BLOCK_M=block)
    assert v.meta["BLOCK_M"] == block and v.meta["HAS_BIAS"] is True
    assert blocked.variant_for(*blocked_args(50, 64, bias=False), BLOCK_M=block).meta[
        "HAS_BIAS"] is False  # fmt: skip
    # A constexpr that follows the dtype variable.
    assert v.meta["DT"] == "tl.float16"
    bf16 = blocked_args(50, 64, dtype="torch.bfloat16")
    assert blocked.variant_for(*bf16, BLOCK_M=block).meta["DT"] == "tl.bfloat16"
    with pytest.raises(loader.ArgumentError) as e:
        blocked(*blocked_args(50, 64), BLOCK_M=32)  # built for 16 and 64 only
    assert "BLOCK_M=32 was asked for" in str(e.value) and fake.launches == []
    assert "Pass the BLOCK_M that launch_config() gives" in str(e.value)
    assert "bias_ptr=" not in str(e.value)  # an address says nothing
    blocked(*blocked_args(50, 64), BLOCK_M=block)
    assert len(fake.launches) == 1


def _scale_word(launch: Any) -> float:
    """The fp32 scale slot of a scaled_kernel launch (x, out, scale, n)."""
    return float(struct.unpack("<f", struct.pack("<Q", launch.params[2])[:4])[0])


def test_an_optional_scalar_is_built_both_ways_and_zero_is_not_none(
    shipped: Path, fake: FakeLib
) -> None:
    """``scale: float | None`` with a ``scale is not None`` heuristics rule: a call's None
    runs the variant compiled with scale = None, and 0.0 is a scale like any other (it
    was read as None when a None test was ``scale != 0``)."""
    text = describe_plan(make_plan(load(DATA / "shipped.toml")))
    assert "optional (built as passed and as None): scale" in text
    assert "HAS_SCALE = scale is not None (@triton.heuristics)" in text
    scaled = loader.open(shipped)["scaled"]
    assert [d.expr for d in scaled.spec.derived] == ["scale is not None"]
    x, out = T(0x1000, 3000, dtype="torch.float32"), T(0x2000, 3000, dtype="torch.float32")
    none = scaled.variant_for(x, out, None, 3000)
    assert none.meta["HAS_SCALE"] is False and "scale" not in none.abi
    for scale in (0.0, 2.5, 0):
        given = scaled.variant_for(x, out, scale, 3000)
        assert given.meta["HAS_SCALE"] is True and "scale" in given.abi
    for _ in range(3):  # the checked path first, then the fast path, for each binding
        for scale in (None, 0.0, 2.5):
            scaled(x, out, scale, 3000)
            launch = fake.launches[-1]
            assert len(launch.params) == (5 if scale is None else 6)  # + 2 scratch pointers
            if scale is not None:
                assert _scale_word(launch) == scale
    assert scaled.binding([x, out, None, 3000]) == ("none",)
    assert scaled.binding([x, out, 0.0, 3000]) == ("given",)
    assert scaled.launch_config(dtypes={"scale": "none"}, n=3000)["HAS_SCALE"] is False
    with pytest.raises(loader.ArgumentError, match="scale"):
        scaled(x, out, "two", 3000)
    rms = loader.open(shipped)["rms"]  # a scalar the recipe does not list as optional
    with pytest.raises(loader.ArgumentError) as err:
        rms(*rms_args(4, 1024)[:-1], None)
    assert "argument 'eps' is None, and the bundle was built for a value (fp32)" in str(err.value)
    assert "list eps under the recipe's optional" in str(err.value)


OFFSET_KERNEL = """
import triton
import triton.language as tl


@triton.heuristics({"HAS_OFF": lambda args: args["off"] is not None})
@triton.jit
def add_kernel(x_ptr, off, n, HAS_OFF: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    if HAS_OFF:
        x = x + off
    tl.store(x_ptr + offs, x, mask=offs < n)
"""

OFFSET_RECIPE = """
format = 1
[bundle]
name = "offset"
version = "0.1"
targets = ["sm_90"]
[[kernel]]
name = "add"
source = "k.py:add_kernel"
grid = "cdiv(n, BLOCK)"
buckets = { n = [1024] }
fixed = { BLOCK = 256 }
signature = { x_ptr = "*i32", off = "i32", n = "i32" }
specializations = [{ "*" = 16 }]
optional = ["off"]
"""


def test_an_optional_integer_is_never_tested_for_divisibility_when_none(
    tmp_path: Path, fake: FakeLib
) -> None:
    """An i32 compiled in as None has no value for a "divisible by 16" assumption to test:
    the variant built from that specialization assumes nothing of it."""
    (tmp_path / "k.py").write_text(OFFSET_KERNEL)
    (tmp_path / "r.toml").write_text(OFFSET_RECIPE)
    out = tmp_path / "r.aotc"
    build(tmp_path / "r.toml", out, env_for(tmp_path / "cache"), tmp_path,
          TuneOptions(enabled=False, db=tmp_path / "db.jsonl"))  # fmt: skip
    add = loader.open(out)["add"]
    x = T(0x1000, 100, dtype="torch.int32")
    both = {"x_ptr": 16, "n": 16}
    for off, has, assumed in ((None, False, both), (16, True, {**both, "off": 16}),
                              (3, True, {}), (None, False, both)):  # fmt: skip
        v = add.variant_for(x, off, 96)
        assert (v.meta["HAS_OFF"], dict(v.assume)) == (has, assumed)
        add(x, off, 96)
    assert len(fake.launches) == 4


def test_a_scalar_always_passed_needs_no_value_for_its_none_test(
    tmp_path: Path, fake: FakeLib
) -> None:
    """The same kernel with `scale` not listed as optional: its `scale is not None` rule is
    True for every variant (it used to stop the plan: no value for scale), a call's 0.0
    runs it, and a call's None is refused by name."""
    shutil.copytree(DATA, tmp_path / "s")
    text = (DATA / "shipped.toml").read_text()
    start = text.index("[[kernel]]\n# An optional scalar")
    kernel = text[start:].replace('optional = ["scale"]\n', "")
    (tmp_path / "s" / "r.toml").write_text(text[: text.index("[[kernel]]")] + kernel)
    out = tmp_path / "r.aotc"
    build(tmp_path / "s" / "r.toml", out, env_for(tmp_path / "cache"), tmp_path,
          TuneOptions(enabled=False, db=tmp_path / "db.jsonl"))  # fmt: skip
    scaled = loader.open(out)["scaled"]
    assert scaled.launch_config(n=3000)["HAS_SCALE"] is True
    x, y = T(0x1000, 3000, dtype="torch.float32"), T(0x2000, 3000, dtype="torch.float32")
    assert scaled.variant_for(x, y, 0.0, 3000).meta["HAS_SCALE"] is True
    scaled(x, y, 0.0, 3000)
    with pytest.raises(loader.ArgumentError, match="list scale under the recipe's optional"):
        scaled(x, y, None, 3000)
    assert len(fake.launches) == 1


def test_a_none_test_of_a_pointer_compares_its_address_with_zero(tmp_path: Path) -> None:
    """Written ``x is None`` (or translated from a rule), a pointer's None test is kept as
    ``x == 0`` in the bundle: the loader passes a pointer given as None as 0."""
    recipe = load(DATA / "shipped.toml")
    blocked = next(k for k in recipe.kernels if k.name == "blocked")
    assert blocked.heuristics == {"HAS_BIAS": "bias_ptr is not None"}
    assert blocked.derived["HAS_BIAS"].text == "bias_ptr != 0"


def test_the_default_specialization_is_the_jits_for_the_example() -> None:
    plan = make_plan(load(DATA / "shipped.toml"))
    mm = next(i for i in plan.instances if i.kernel.name == "mm")
    top, special = (dict(s.assume) for s in mm.specs[:2])
    # Strides of 1 are compiled in as 1; pointers and multiples of 16 as divisible by 16;
    # the bucket key M left free, and first the same with M divisible by 16, as the JIT
    # compiles a call at M = 4096.
    assert special["sak"] == 1 and special["scn"] == 1 and special["sam"] == 16
    assert special["a_ptr"] == 16 and "M" not in special
    assert top == {**special, "M": 16}


def test_integers_that_follow_the_bucket_are_specialised_as_the_jit_does() -> None:
    """blocked's EM follows its bucket key n and is divisible by 16 at the largest bucket:
    it is assumed so with n and without (as the JIT would; a batch stride so assumed is
    what lets Triton pipeline a program's loads), then neither."""
    plan = make_plan(load(DATA / "shipped.toml"))
    blocked = next(i for i in plan.instances if i.kernel.name == "blocked")
    wide, follow, aligned = (dict(s.assume) for s in blocked.specs[:3])
    assert wide == {**follow, "n": 16} and follow == {**aligned, "EM": 16}
    assert "n" not in aligned and "EM" not in aligned and len(blocked.specs) == 4
    mm = next(i for i in plan.instances if i.kernel.name == "mm")  # nothing follows M there
    assert not any("EM" in dict(s.assume) for s in mm.specs)


def test_a_call_runs_the_widest_variant_its_integers_allow(shipped: Path, fake: FakeLib) -> None:
    blocked = loader.open(shipped)["blocked"]
    block = blocked.launch_config(dtypes={"T": "fp16", "bias_ptr": "given"}, n=64)["BLOCK_M"]
    both = blocked.variant_for(*blocked_args(64, 128), BLOCK_M=block)
    em_only = blocked.variant_for(*blocked_args(50, 64), BLOCK_M=block)  # between buckets
    neither = blocked.variant_for(*blocked_args(64, 72), BLOCK_M=block)
    assert both.assume["EM"] == 16 and both.assume["n"] == 16
    assert em_only.assume["EM"] == 16 and "n" not in em_only.assume
    assert "n" not in neither.assume and "EM" not in neither.assume


def test_a_call_at_a_multiple_of_16_runs_the_variant_that_assumes_it(
    shipped: Path, fake: FakeLib
) -> None:
    mm = loader.open(shipped)["mm"]
    at, between = mm.variant_for(*mm_args(64)), mm.variant_for(*mm_args(50))
    assert at.assume["M"] == 16 and "M" not in between.assume
    assert {**between.assume, "M": 16} == dict(at.assume) and at.meta == between.meta


def test_a_shape_call_value_refuses_a_tensor_of_another_rank(shipped: Path, fake: FakeLib) -> None:
    rms = loader.open(shipped)["rms"]
    args = rms_args(4, 1024)
    args[1] = T(0x1000, 2, 4, 1024)  # X as 3-D: dimension 0 is no row count
    with pytest.raises(loader.ArgumentError, match="built for as 2-D; this X is 3-D"):
        rms(*args)
    rms(*args, n_rows=8)  # passed by keyword, the rank does not matter
    assert fake.launches[-1].grid == (8, 1, 1)


def test_a_size_that_no_expression_reads_must_be_an_argument(tmp_path: Path) -> None:
    shutil.copytree(DATA, tmp_path, dirs_exist_ok=True)
    path = tmp_path / "shipped.toml"
    path.write_text(path.read_text().replace("sizes = { experts = 8,", "sizes = { expert = 8,"))
    with pytest.raises(
        RecipeError, match=re.escape("blocked.sizes.EM: reads experts, which is no")
    ):
        load(path)
    path.write_text(
        path.read_text().replace("sizes = { expert = 8,", "sizes = { unused = 3, experts = 8,")
    )
    with pytest.raises(RecipeError, match=re.escape("blocked.sizes.unused: unused is no argument")):
        load(path)


def test_launch_config_answers_for_every_binding_or_asks_which(
    shipped: Path, fake: FakeLib
) -> None:
    rms = loader.open(shipped)["rms"]
    cfg = rms.launch_config(n_rows=5, n_cols=3000)  # both dtypes launch the same here
    assert cfg["BLOCK_SIZE"] == 4096 and "num_warps" in cfg
    with pytest.raises(loader.ArgumentError, match="BLOCK_SIZE in"):
        rms.launch_config(n_rows=5, n_cols=2048)  # refused as the call would be
    mm = loader.open(shipped)["mm"]
    assert mm.launch_config(dtypes={"bias_ptr": "given"}, M=16)["BLOCK_M"] == 32


def test_shards_with_optional_pointers_merge_to_the_full_build(
    shipped: Path, tmp_path: Path
) -> None:
    from aot.merge import merge
    from aot.shard import Slice

    cache = shipped.parent / "cache"  # the module's build filled it
    parts = []
    for i in (1, 2, 3):
        out = tmp_path / f"part{i}.aotc"
        build(DATA / "shipped.toml", out, env_for(cache), tmp_path,
              TuneOptions(enabled=False, db=tmp_path / "db.jsonl"), Slice(i, 3))  # fmt: skip
        parts.append(out)
    merge(parts, tmp_path / "merged.aotc")
    assert (tmp_path / "merged.aotc").read_bytes() == shipped.read_bytes()


def test_no_specialization_is_planned_twice() -> None:
    """A listed size that is also a bucket key (rms's n_cols) is assumed divisible by 16
    already: the bucket-key variant would repeat the JIT's, and compile each config twice."""
    plan = make_plan(load(DATA / "shipped.toml"))
    for inst in plan.instances:
        assert len(set(inst.specs)) == len(inst.specs), inst.kernel.name
