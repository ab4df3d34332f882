"""Plan expansion and pruning, and the heuristic's choices."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot import heuristic
from aot.cli import main
from aot.errors import RecipeError
from aot.plan import GENERIC, make_plan, plan_size
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


def test_grid_past_cuda_limits_prunes_the_configs_that_exceed(
    recipe_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # At n = 65536: BLOCK=256 launches 76,800 programs along y (over 65,535), BLOCK=1024 19,200.
    path = recipe_dir / "small.toml"
    path.write_text(path.read_text().replace('"cdiv(n, BLOCK)"', '["1", "n // BLOCK * 300"]'))
    plan = make_plan(load(path))
    for inst in plan.instances:
        assert [dict(c.meta)["BLOCK"] for c in inst.configs] == [1024]
        ((c, why),) = inst.pruned
        assert dict(c.meta)["BLOCK"] == 256
        assert why == (
            f"grid y exceeds CUDA's limit of 65,535 at n=65536 on {inst.target.name} (y = 76,800)"
        )
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 fit, 1 pruned (1× grid y exceeds CUDA's limit of 65,535 at n=65536)" in out
    assert "plan size: 32 (bucket, variant) pairs, of a cap of 1,000,000" in out


def test_plan_size_counts_every_factor_without_expanding() -> None:
    sizes = plan_size(load(ROOT / "recipes" / "example.toml"))
    # 14 buckets × 480 configs × 2 specializations × 2 dtypes × 2 targets
    assert sizes["[[kernel]] matmul"][0] == 14 * 480 * 2 * 2 * 2
    assert sizes["[[kernel]] rmsnorm"][0] == 14 * 12 * 2 * 2 * 2


def test_plan_cap_refuses_a_big_matrix_and_the_recipe_can_raise_it(recipe_dir: Path) -> None:
    path = recipe_dir / "small.toml"
    small = 2 * 2 * 2 * 2 * 2  # buckets × configs × specializations × dtypes × targets
    with pytest.raises(RecipeError) as e:
        make_plan(load(path), max_size=small - 1)
    assert f"raise the cap with max_plan_size = {small} under [bundle]" in str(e.value)
    assert str(e.value).startswith(f"{path}: [[kernel]] scale: 32 = 2 buckets × 2 configs")
    path.write_text(
        path.read_text().replace('version = "1.0"', 'version = "1.0"\nmax_plan_size = 31')
    )
    with pytest.raises(RecipeError, match="over the cap of 31"):
        make_plan(load(path))
    path.write_text(path.read_text().replace("max_plan_size = 31", f"max_plan_size = {small}"))
    assert make_plan(load(path)).size == 16


def test_plan_of_a_3000_by_3000_bucket_matrix_is_refused_before_expanding(
    recipe_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bounds = list(range(1, 3001))
    path = recipe_dir / "small.toml"
    text = path.read_text()
    path.write_text(text.replace("buckets = { n = [1024, 65536] }",
                                 f'call = {{ m = "keyword" }}\n'
                                 f"buckets = {{ n = {bounds}, m = {bounds} }}"))  # fmt: skip
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "[[kernel]] scale: 144,000,000 = 9,000,000 buckets × 2 configs" in err
    assert "max_plan_size = 144000000 under [bundle]" in err and "Traceback" not in err


def test_what_a_kernel_file_prints_at_import_goes_to_stderr_announced(
    recipe_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel = recipe_dir / "kernels" / "small.py"
    kernel.write_text("import sys\nprint('hello from the kernel', sys.argv)\n" + kernel.read_text())
    assert main(["plan", str(recipe_dir / "small.toml")]) == 0
    out, err = capsys.readouterr()
    assert "hello" not in out and out.startswith("recipe small 1.0")
    assert f"aotc: importing small.py printed:\n  | hello from the kernel ['{kernel}']\n" in err


def test_a_worker_process_does_not_repeat_what_a_kernel_file_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """aotc shows a kernel file's import output once; each compile worker importing the
    file again (17 of them at -j 16) stays quiet, unless the import fails there."""
    import multiprocessing

    from aot.kernelfile import load_module

    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    (tmp_path / "chatty.py").write_text("print('hello')\n")
    load_module(tmp_path / "chatty.py")
    assert capsys.readouterr().err == ""
    (tmp_path / "broken.py").write_text("print('about to fail')\nraise ValueError('no')\n")
    with pytest.raises(ValueError):
        load_module(tmp_path / "broken.py")
    assert "importing broken.py printed:\n  | about to fail" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("constraint", "says"),
    [
        (
            "maxnreg <= 10",
            "scale.constraints[0]: cannot evaluate: 'maxnreg <= 10': no value for "
            "maxnreg; maxnreg has a value only where [kernel.space] lists it: give it "
            "there, or leave it out of the constraint",
        ),
        ("n < 2048", "scale.constraints: no candidate config is allowed at n=65536"),
        ("BLOCK < 16", "scale.space: no candidate fits sm_80: constraint 'BLOCK < 16' fails"),
    ],
)
def test_a_plan_time_error_names_the_recipe_as_given(
    recipe_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    constraint: str,
    says: str,
) -> None:
    """Errors found while planning (a constraint evaluated per bucket) name the recipe by
    the path the user gave, as the recipe's own checks do, not by its absolute path."""
    path = recipe_dir / "small.toml"
    path.write_text(path.read_text().replace("[kernel.space]", f"constraints = [{constraint!r}]"
                                             "\n\n[kernel.space]"))  # fmt: skip
    monkeypatch.chdir(recipe_dir)
    assert main(["plan", "small.toml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"aotc: error: small.toml: [[kernel]] {says}"), err
    assert str(recipe_dir) not in err


def test_the_plan_summary_names_the_recipe_as_given(
    recipe_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(recipe_dir)
    assert main(["plan", "small.toml"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(" (small.toml)"), out
    assert str(recipe_dir) not in out


@pytest.mark.parametrize("bucketed", [False, True])
def test_plan_notes_a_per_call_size_the_grid_reads_but_tuning_sees_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bucketed: bool
) -> None:
    """A launch value read off a tensor per call (rows here, a batch in mamba's bmm_chunk)
    with one value in sizes is tuned at that value alone: plan says so, and not once it
    is a bucket key."""
    from tests.test_launch_value_checks import KERNEL, RECIPE

    rows = "buckets = { n_rows = [1, 1024] }\n"
    sizes = "n_cols = [4096, 8192]" + ("" if bucketed else ", n_rows = 64")
    recipe = RECIPE.replace(rows, rows if bucketed else "").replace("n_cols = [4096, 8192]", sizes)
    (tmp_path / "rows.py").write_text(KERNEL)
    (tmp_path / "rows.toml").write_text(recipe)
    assert main(["plan", str(tmp_path / "rows.toml")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if "per call, tuned" in line]
    if bucketed:
        assert notes == []
    else:
        assert len(notes) == 1 and "the grid reads n_rows = 64 per call" in notes[0], notes
        assert "make it a bucket key, or list its values in sizes" in notes[0]
