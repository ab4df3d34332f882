"""Sharded builds and ``aotc merge``: shard-then-merge is byte-identical to a full build;
conflicting or incomplete parts are refused with the files and the conflict named."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import loader
from aot.build import build, default_output
from aot.cli import main
from aot.errors import BuildError, MergeError, UsageError
from aot.merge import merge, plan_order
from aot.plan import Plan, make_plan
from aot.recipe import load
from aot.shard import Slice, apply
from loader import driver
from loader import manifest as mf
from loader.errors import BundleError
from loader.format import BundleFile, encode, write_atomic
from tests import handmade
from tests.conftest import env_for
from tests.fakecuda import FakeLib

ROOT = Path(__file__).resolve().parents[1]

# small.toml's scale kernel plus one whose BLOCK=48 config fails to compile, so the parts
# carry build.failed rows that the merge must reassemble in the full build's order.
WITH_FAILURES = """
format = 1
[bundle]
name = "mixed"
version = "2"
targets = ["sm_80", "H100"]

[[kernel]]
name = "broken"
source = "kernels/small.py:broken_kernel"
grid = "1"
signature = { x_ptr = "*fp32", n = "i32" }
buckets = { n = [16, 4096] }
[kernel.space]
BLOCK = [48, 64]
[kernel.default]
BLOCK = 48

[[kernel]]
name = "scale"
source = "kernels/small.py:scale_kernel"
grid = "cdiv(n, BLOCK)"
dtypes = { T = ["fp16", "fp32"] }
signature = { x_ptr = "*T", out_ptr = "*T", n = "i32", alpha = "fp32" }
buckets = { n = [1024, 65536] }
[kernel.space]
BLOCK = [256, 1024]
num_stages = [1]
"""


def build_parts(
    recipe: Path, out: Path, cache: Callable[[int], Path], slices: list[Slice]
) -> list[Path]:
    parts = []
    for i, sl in enumerate(slices):
        r = build(recipe, out / f"part{i}.aotc", env_for(cache(i)), out, sl=sl)
        parts.append(r.bundle)
    return parts


def shards(n: int, targets: tuple[str, ...] = ()) -> list[Slice]:
    return [Slice(i, n, targets) for i in range(1, n + 1)]


def test_small_three_shards_with_separate_caches_merge_byte_identical(
    recipe_dir: Path, tmp_path: Path
) -> None:
    recipe = recipe_dir / "small.toml"
    # Every build compiles from scratch, as separate CI runners would. (Not from the shared
    # cache: cubins carry their source folder in their line info, and the session cache may
    # hold cubins compiled from another test's copy of the kernels.)
    full = build(recipe, tmp_path / "full.aotc", env_for(tmp_path / "cache-full"), tmp_path)
    parts = build_parts(recipe, tmp_path, lambda i: tmp_path / f"cache{i}", shards(3))
    for p in parts:
        with BundleFile(p) as bf:
            assert bf.manifest["build"]["shard"]["of"] == 4
    result = merge(parts, tmp_path / "merged.aotc")
    assert result.instances == 4
    assert (tmp_path / "merged.aotc").read_bytes() == full.bundle.read_bytes()
    # Order of the inputs does not matter.
    merge(list(reversed(parts)), tmp_path / "merged2.aotc")
    assert (tmp_path / "merged2.aotc").read_bytes() == full.bundle.read_bytes()


def test_targets_and_shards_combined_with_failures_merge_byte_identical(
    recipe_dir: Path, tmp_path: Path, compile_cache: Path
) -> None:
    recipe = recipe_dir / "mixed.toml"
    recipe.write_text(WITH_FAILURES)
    full = build(recipe, tmp_path / "full.aotc", env_for(compile_cache), tmp_path)
    assert full.failed == 4  # BLOCK=48 on both targets, specialized and generic
    slices = [Slice(1, 1, ("H100",)), *shards(2, ("sm_80",))]
    parts = build_parts(recipe, tmp_path, lambda i: compile_cache, slices)
    assert main(["merge", *map(str, parts), "-o", str(tmp_path / "merged.aotc")]) == 0
    assert (tmp_path / "merged.aotc").read_bytes() == full.bundle.read_bytes()
    # A full bundle given with parts of itself overlaps them identically: still accepted.
    merge([*parts, full.bundle], tmp_path / "again.aotc")
    assert (tmp_path / "again.aotc").read_bytes() == full.bundle.read_bytes()


def test_example_recipe_three_shards_merge_byte_identical(
    tmp_path: Path, compile_cache: Path
) -> None:
    recipe = ROOT / "recipes" / "example.toml"
    full = build(recipe, tmp_path / "full.aotc", env_for(compile_cache), tmp_path)
    parts = build_parts(recipe, tmp_path, lambda i: compile_cache, shards(3))
    assert merge(parts, tmp_path / "merged.aotc").instances == 12
    # the op's routes are made again over the merged instances: the same bytes
    assert (tmp_path / "merged.aotc").read_bytes() == full.bundle.read_bytes()


def test_round_robin_over_plan_order() -> None:
    plan = make_plan(load(ROOT / "recipes" / "example.toml"))
    labels = [i.label for i in plan.instances]
    assert labels == [
        "matmul[T=fp16] on sm_80",
        "matmul[T=bf16] on sm_80",
        "matmul[T=fp16] on sm_90",
        "matmul[T=bf16] on sm_90",
        "matmul_tma[T=fp16] on sm_80",
        "matmul_tma[T=bf16] on sm_80",
        "matmul_tma[T=fp16] on sm_90",
        "matmul_tma[T=bf16] on sm_90",
        "rmsnorm[T=fp16] on sm_80",
        "rmsnorm[T=bf16] on sm_80",
        "rmsnorm[T=fp16] on sm_90",
        "rmsnorm[T=bf16] on sm_90",
    ]
    part, record = apply(plan, Slice(2, 3))
    assert [i.label for i in part.instances] == [labels[1], labels[4], labels[7], labels[10]]
    assert record == {"index": 2, "count": 3, "instances": 4, "of": 12}
    part, record = apply(plan, Slice(1, 2, ("sm_90",)))
    assert [i.label for i in part.instances] == [labels[2], labels[6], labels[10]]
    assert record is not None and record["targets"] == ["sm_90"]
    assert apply(plan, Slice(1, 1, ("sm_80", "sm_90")))[1] is None  # the whole plan: full
    with pytest.raises(UsageError, match=r"--targets H100: not a target of example.toml"):
        apply(plan, Slice(1, 1, ("H100",)))
    assert default_output(plan.recipe, Path("/w"), Slice(2, 3, ("sm_90",))) == Path(
        "/w/artifacts/example-0.1.0.sm_90.shard2of3.aotc"
    )
    # The manifest alone gives the same order (what merge relies on).
    with_instances = [(i.kernel.name, i.target.name, i.dtypes) for i in plan.instances]
    m = mf.Manifest(
        "x", "1", {}, tuple(t.to_target() for t in plan.recipe.targets), _kernel_table(plan)
    )
    assert list(plan_order(m)) == with_instances


def _kernel_table(plan: Plan) -> tuple[mf.KernelSpec, ...]:
    return tuple(
        mf.KernelSpec(k.name, (), dict(k.dtypes), ("1", "1", "1"), (), (), ())
        for k in plan.recipe.kernels
    )


@pytest.mark.parametrize(
    ("shard", "targets", "message"),
    [
        ("0/3", None, "between 1 and N"),
        ("4/3", None, "between 1 and N"),
        ("2", None, "expected I/N"),
        ("a/b", None, "expected I/N"),
        (None, " , ", "one or more target"),
    ],
)
def test_bad_slice_options(shard: str | None, targets: str | None, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        Slice.parse(shard, targets)


def _with_model(recipe_dir: Path) -> Path:
    """small.toml's kernel and tests/data/model/tiny.toml's model in one recipe."""
    model = (recipe_dir / "model" / "tiny.toml").read_text().split("[model]", 1)[1]
    model = model.replace('"tiny.py:make_layer"', '"model/tiny.py:make_layer"')
    path = recipe_dir / "with-model.toml"
    path.write_text((recipe_dir / "small.toml").read_text() + "\n[model]" + model)
    return path


@pytest.mark.parametrize(
    ("recipe", "shard", "targets"),
    [
        ("with-model", "2/2", None),
        ("with-model", None, "H100"),
        # a model alone has no instances to slice; it was built whole, as if unsharded
        ("model/tiny", "1/2", None),
    ],
)
def test_a_sharded_build_with_a_model_is_refused(
    recipe: str, shard: str | None, targets: str | None, recipe_dir: Path, tmp_path: Path
) -> None:
    """The model product cannot be sliced yet: a slice that is not all of it is refused
    before any work, and nothing is written."""
    from aot.model import ModelOptions

    path = _with_model(recipe_dir) if recipe == "with-model" else recipe_dir / f"{recipe}.toml"
    with pytest.raises(BuildError, match=r"^\[model\]: sharded builds \(--shard/--targets\) do "
                       "not build models yet; build the recipe whole$"):  # fmt: skip
        build(path, None, env_for(tmp_path / "c"), tmp_path, sl=Slice.parse(shard, targets),
              model=ModelOptions(gpus=[]))  # fmt: skip
    assert not (tmp_path / "artifacts").exists()


def test_a_slice_covers_a_model_only_when_it_is_the_whole_build() -> None:
    targets = load(ROOT / "tests" / "data" / "small.toml").targets  # sm_80, H100 (sm_90)
    assert Slice().covers(targets) and Slice.parse("1/1", "sm_80,H100").covers(targets)
    assert Slice.parse(None, "sm_80,sm_90").covers(targets)
    assert not Slice.parse(None, "sm_80").covers(targets)
    assert not Slice.parse("1/2", None).covers(targets)


# -- conflicts, with hand-made parts (no compiling) -------------------------------------------


def handmade_part(
    path: Path,
    keep: Callable[[mf.InstanceSpec], bool],
    change: Callable[[mf.Manifest], mf.Manifest] = lambda m: m,
) -> Path:
    m = handmade.manifest()
    k = m.kernels[0]
    k = dataclasses.replace(k, instances=tuple(i for i in k.instances if keep(i)))
    m = dataclasses.replace(m, kernels=(k,), build={"shard": {"index": 1, "count": 2}})
    m = change(m)
    payloads = {e: b for e, b in handmade.payloads(handmade.manifest()).items()}
    used = {v.entry for i in m.kernels[0].instances for v in i.variants.values()}
    write_atomic(path, encode(m.to_json(), {e: payloads[e] for e in used}))
    return path


@pytest.fixture
def halves(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    a = handmade_part(tmp_path / "a.aotc", lambda i: i.target == "sm_90")
    b = handmade_part(tmp_path / "b.aotc", lambda i: i.target == "sm_80")
    yield a, b


def test_handmade_halves_merge_to_the_handmade_bundle(
    halves: tuple[Path, Path], tmp_path: Path
) -> None:
    merge(list(halves), tmp_path / "m.aotc")
    m = handmade.manifest()
    expected = encode(dataclasses.replace(m, build={"failed": []}).to_json(), handmade.payloads(m))
    assert (tmp_path / "m.aotc").read_bytes() == expected


def test_missing_part(halves: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(MergeError, match=r"2 of 4 instances are missing") as e:
        merge([halves[0]], tmp_path / "m.aotc")
    assert "scale[T=fp16] on sm_80" in str(e.value) and "a.aotc" in str(e.value)
    assert not (tmp_path / "m.aotc").exists()


def test_same_instance_with_different_content(
    halves: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def retuned(m: mf.Manifest) -> mf.Manifest:
        k = m.kernels[0]
        inst = k.instances[0]
        first = dataclasses.replace(inst.choices[0], config="c9", how="tuned")
        inst = dataclasses.replace(inst, choices=(first, *inst.choices[1:]))
        return dataclasses.replace(m, kernels=(dataclasses.replace(k, instances=(inst,)),))

    c = handmade_part(tmp_path / "c.aotc", lambda i: i.target == "sm_90", retuned)
    out = tmp_path / "m.aotc"
    code = main(["merge", str(halves[0]), str(halves[1]), str(c), "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "c.aotc" in err and "a.aotc" in err and "scale[T=fp16] on sm_90" in err
    assert "bucket [1]: config c0 (untuned (heuristic)) vs c9 (tuned)" in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda m: dataclasses.replace(m, provenance={**m.provenance, "recipe_sha256": "b"}),
            "differ in provenance.recipe_sha256 .* different recipes",
        ),
        (
            lambda m: dataclasses.replace(m, provenance={**m.provenance, "triton": "3.7.0"}),
            "differ in provenance.triton .*'none'.*'3.7.0'.* different Triton versions",
        ),
        (lambda m: dataclasses.replace(m, name="other"), "differ in the bundle"),
        (lambda m: dataclasses.replace(m, targets=m.targets[::-1]), "differ in the targets"),
        (
            lambda m: dataclasses.replace(m, build={**m.build, "tuning": {"x": 1}}),
            r"differ in build.tuning",
        ),
    ],
)
def test_parts_that_disagree(
    halves: tuple[Path, Path],
    tmp_path: Path,
    change: Callable[[mf.Manifest], mf.Manifest],
    message: str,
) -> None:
    c = handmade_part(tmp_path / "c.aotc", lambda i: i.target == "sm_80", change)
    with pytest.raises(MergeError, match=message) as e:
        merge([halves[0], c], tmp_path / "m.aotc")
    assert "c.aotc" in str(e.value) and "a.aotc" in str(e.value)


def test_not_a_bundle(halves: tuple[Path, Path], tmp_path: Path) -> None:
    db = tmp_path / "tuning.json"
    db.write_text("{}")
    with pytest.raises(UsageError, match="tuning databases are merged with `aotc merge-db`"):
        merge([halves[0], db], tmp_path / "m.aotc")


def test_loader_refuses_a_partial_bundle(halves: tuple[Path, Path]) -> None:
    driver.install(driver.Driver(FakeLib()))
    try:
        with pytest.raises(BundleError, match=r"a partial bundle \(shard 1/2.*aotc merge"):
            loader.open(halves[0])
    finally:
        driver.install(None)


def test_tuned_parts_with_one_database_merge_to_the_tuned_full_build(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """The CI variant with tuning: a GPU job tunes its target; the CPU shards decide from
    its database (H200 takes H100's measurements: "transferred"); the merge equals a full
    tuned build."""
    from aot.build import TuneOptions
    from tests.fakegpu import H100, FakeWorker

    recipe = recipe_dir / "tune.toml"  # targets H100, H200, sm_80; a fake H100 is present
    cache = env_for(tmp_path / "cache")
    db = tmp_path / "tuning.jsonl"
    gpu = TuneOptions(db=db, gpus=[H100], worker_factory=lambda g: FakeWorker())
    full = build(recipe, tmp_path / "full.aotc", cache, tmp_path, gpu)
    assert full.decided == {"measured": 2, "transferred": 2, "heuristic": 2}
    part_gpu = build(recipe, tmp_path / "gpu.aotc", cache, tmp_path, gpu, Slice(1, 1, ("H100",)))
    cpu = TuneOptions(enabled=False, db=db)
    parts = [
        build(recipe, tmp_path / f"cpu{i}.aotc", cache, tmp_path, cpu, sl).bundle
        for i, sl in enumerate(shards(2, ("H200", "sm_80")))
    ]
    assert part_gpu.decided == {"measured": 2, "transferred": 0, "heuristic": 0}
    merge([part_gpu.bundle, *parts], tmp_path / "merged.aotc")
    assert (tmp_path / "merged.aotc").read_bytes() == full.bundle.read_bytes()
