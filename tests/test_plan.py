"""Plan expansion and pruning, and the heuristic's choices."""

from __future__ import annotations

from pathlib import Path

from aot import heuristic
from aot.plan import GENERIC, make_plan
from aot.recipe import load
from aot.targets import GPUS, resolve

ROOT = Path(__file__).resolve().parents[1]


def test_small_plan_expands_kernel_target_dtype_config_spec(recipe_dir: Path) -> None:
    plan = make_plan(load(recipe_dir / "small.toml"))
    assert len(plan.instances) == 4  # 2 targets × 2 dtypes
    assert {(i.target.name, i.dtypes) for i in plan.instances} == {
        (t, (("T", d),)) for t in ("sm_80", "H100") for d in ("fp16", "fp32")
    }
    assert all(len(i.configs) == 2 and i.specs[-1] == GENERIC for i in plan.instances)
    assert plan.size == 4 * 2 * 2
    assert len(set(plan.variants())) == plan.size


def test_example_plan_prunes_by_shared_memory_per_target() -> None:
    plan = make_plan(load(ROOT / "recipes" / "example.toml"))
    mm80 = next(i for i in plan.instances if i.kernel.name == "matmul" and i.target.arch == "sm_80")
    mm90 = next(i for i in plan.instances if i.kernel.name == "matmul" and i.target.arch == "sm_90")
    assert len(mm80.configs) + len(mm80.pruned) == 480
    assert len(mm80.pruned) > len(mm90.pruned) > 0  # A100 has 163 KiB per block, H100 227
    for c, why in mm80.pruned:
        v = c.values()
        assert (v["BLOCK_M"] * v["BLOCK_K"] + v["BLOCK_K"] * v["BLOCK_N"]) * 2 * v[
            "num_stages"
        ] > 166912
        assert "SMEM" in why


def test_threads_limit_prunes(recipe_dir: Path) -> None:
    text = (recipe_dir / "small.toml").read_text().replace("num_warps = [4]", "num_warps = [4, 64]")
    (recipe_dir / "small.toml").write_text(text.replace("num_warps = 4\n", ""))
    # 64 warps is rejected at load (not a valid num_warps); the table limit is 1024 threads
    import pytest

    from aot.errors import RecipeError

    with pytest.raises(RecipeError, match="64 is not a power of two; use 1, 2, 4, 8, 16 or 32"):
        load(recipe_dir / "small.toml")


def test_heuristic_small_tiles_for_decode_large_tiles_for_prefill() -> None:
    plan = make_plan(load(ROOT / "recipes" / "example.toml"))
    mm = next(i for i in plan.instances if i.kernel.name == "matmul" and i.target.arch == "sm_90")
    small = dict(heuristic.rank(mm, (1,))[0].meta)
    large = dict(heuristic.rank(mm, (8192,))[0].meta)
    assert small["BLOCK_M"] == 16
    assert large["BLOCK_M"] * large["BLOCK_N"] >= 128 * 128
    # ties go to the recipe's defaults
    assert heuristic.rank(mm, (8192,))[0].num_stages == 3


def test_heuristic_is_deterministic_and_total() -> None:
    plan = make_plan(load(ROOT / "recipes" / "example.toml"))
    for inst in plan.instances:
        for bucket in inst.buckets:
            ranked = heuristic.rank(inst, bucket)
            assert sorted(ranked) == sorted(inst.configs)
            assert ranked == heuristic.rank(inst, bucket)


def test_target_table() -> None:
    assert resolve("h100").name == "H100" and resolve("SM_90").name == "sm_90"
    assert resolve("H100-PCIE").sms == 114
    for g in GPUS:
        assert g.smem_per_block <= g.smem_per_sm and g.cc[0] in (8, 9)
