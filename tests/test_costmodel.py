"""The learned cost model on the CPU (issue 19): training data from tuning databases,
features from real compiles, the LightGBM ranker, its use in builds without a GPU and
in the tuner's order, and the ``aotc cost-model`` commands."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from aot.build import TuneOptions, build
from aot.cli.commands import cli
from aot.costmodel import model as cm
from aot.costmodel import predict
from aot.costmodel.data import Catalog, groups, read_records, variant_ids
from aot.costmodel.features import NAMES, Facts, blocks_per_sm, relative
from aot.env import Environment
from aot.plan import Config
from aot.targets import resolve
from aot.tune import strategies
from aot.tune.db import Record
from aot.tune.decide import problem
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for as suite_env
from tests.fakegpu import H100, FakeWorker

# -- training data --------------------------------------------------------------------


def rec(config: str, kind: str = "bench", ms: float | None = 1.0, ok: bool = True,
        n: int = 4096, round_: int = 0) -> Record:  # fmt: skip
    return Record(kernel="k", source="s" * 64, triton="3.6.0", device="NVIDIA H200",
                  arch="sm_90", dtypes={"T": "fp16"}, problem={"n": n}, config=config,
                  kind=kind, ok=ok, ms=ms, round=round_)  # fmt: skip


def test_a_bucket_is_labelled_by_its_careful_times_and_never_by_failures() -> None:
    records = [
        rec("a", ms=1.0), rec("b", ms=2.0), rec("c", ms=0.5),
        rec("a", "final", 1.5, round_=0), rec("a", "final", 1.1, round_=1),
        rec("a", "final", 1.2, round_=2),
        rec("c", "verify", None, ok=False),  # fast but wrong
        rec("x", ms=3.0, n=8192),  # a bucket with one config ranks nothing
    ]  # fmt: skip
    (g,) = groups(records, "db")
    assert dict(g.times) == {"a": 1.2, "b": 2.0}  # median of a's rounds; c failed
    assert g.failed == {"c"} and g.best == 1.2


def test_relevance_is_highest_at_the_best_and_falls_per_five_percent() -> None:
    assert cm.relevance(1.0, 1.0) == cm.LEVELS
    assert cm.relevance(1.04, 1.0) == cm.LEVELS
    assert cm.relevance(1.06, 1.0) == cm.LEVELS - 1
    assert cm.relevance(100.0, 1.0) == 0


def test_resident_blocks_follow_registers_shared_memory_and_threads() -> None:
    h200 = resolve("H200")
    assert blocks_per_sm(h200, 128, Facts(regs=32, shared=0, local=0)) == 16  # 2048 threads
    assert blocks_per_sm(h200, 256, Facts(regs=255, shared=0, local=0)) == 1  # registers
    big = Facts(regs=32, shared=100 * 1024, local=0)
    assert blocks_per_sm(h200, 128, big) == h200.smem_per_sm // (100 * 1024 + 1024)


def test_a_persistent_grid_counts_its_waves_in_tiles() -> None:
    # min(NUM_SMS, tiles) launches 132 programs at every tile size; its work is the tiles
    from aot.costmodel.features import work_units
    from loader.expr import parse

    env = {"NUM_SMS": 132, "M": 4096, "N": 4096}
    persistent = [parse("min(NUM_SMS, cdiv(M, BM) * cdiv(N, BN))")]
    for bm, tiles in ((128, 1024), (256, 512)):
        assert work_units(persistent, {**env, "BM": bm, "BN": 128}, 132) == tiles
    assert work_units(persistent, {**env, "M": 64, "BM": 64, "BN": 128}, 32) == 32
    plain = [parse("cdiv(M, BM)"), parse("cdiv(N, BN)")]
    assert work_units(plain, {**env, "BM": 128, "BN": 128}, 1024) == 1024
    assert work_units([parse("NUM_SMS * 2")], env, 264) == 264  # grows with the SMs itself


def test_relative_features_compare_a_config_with_its_bucket() -> None:
    def row(tile: float, warps: float) -> dict[str, float]:
        r = {n: 0.0 for n in NAMES}
        r.update(log2_tile=tile, log2_block=tile, log2_warps=warps, occupancy=0.5,
                 _coverage=2.0 ** tile, _traffic=2.0 ** tile, _heuristic=tile)  # fmt: skip
        return r

    small, large = relative([row(7.0, 2.0), row(10.0, 3.0)])
    i = NAMES.index
    assert large[i("tile_rel")] == 0.0 and small[i("tile_rel")] == -3.0
    assert small[i("warps_rel")] == -1.0 and small[i("coverage_rel")] == 0.0
    assert large[i("traffic_rel")] == 3.0 and small[i("traffic_rel")] == 0.0
    assert len(small) == len(NAMES)


def test_work_in_flight_counts_the_programs_one_wave_keeps_per_sm() -> None:
    # a grid smaller than the GPU keeps few warps per SM whatever its occupancy could be:
    # 128 programs of 8 warps hold fewer warps and elements in flight than 1024 of 4
    from aot.costmodel.features import in_flight

    h200 = resolve("H200")
    few_warps, few_elems = in_flight(h200, 128, 5, 8, 4096)
    many_warps, many_elems = in_flight(h200, 1024, 10, 4, 4096)
    assert few_warps < math.log2(8) and many_warps > few_warps + 1.9
    assert many_elems - few_elems == pytest.approx(math.log2(1024 / 128))
    assert in_flight(h200, 10**6, 2, 4, 1024) == (3.0, 11.0)  # residency bounds a full grid


def test_a_block_past_the_size_its_grid_leaves_it_counts_its_overhang() -> None:
    # one program per row: the row's block against the row (the size the grid does not
    # read); a matmul's K step against K; tiles the grid reads are coverage's, not this
    from aot.costmodel.features import block_overhang
    from loader.expr import parse

    def cfg(**meta: Any) -> Config:
        return Config(tuple(sorted(meta.items())), num_warps=4, num_stages=1)

    rows = [parse("M")]
    assert block_overhang(rows, {"M": 64, "N": 4096}, cfg(BLOCK_N=8192)) == 1.0
    assert block_overhang(rows, {"M": 64, "N": 4096}, cfg(BLOCK_N=4096)) == 0.0
    assert block_overhang(rows, {"M": 64, "N": 4096}, cfg(BLOCK_N=1024)) == 0.0  # loops
    assert block_overhang(rows, {"M": 8, "N": 2000}, cfg(BLOCK_N=8192)) == 2.0  # over 2048
    tiles = [parse("cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N)")]
    small = {"M": 16, "N": 64, "K": 32}
    assert block_overhang(tiles, small, cfg(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32)) == 0.0
    assert block_overhang(tiles, small, cfg(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128)) == 2.0
    flags = cfg(BLOCK_N=4096, EVEN=True, SPLIT=3)  # neither a flag nor 3 is a block
    assert block_overhang(rows, {"M": 1, "N": 1024}, flags) == 2.0
    assert block_overhang([parse("N")], {"N": 1024}, cfg(BLOCK_N=4096)) == 0.0
    assert NAMES[-1] == "block_overhang"


SOFTMAX = """
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n + offs, mask=offs < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + tl.program_id(0) * n + offs, e / tl.sum(e, axis=0), mask=offs < n)
"""


# a softmax whose 16k-wide block spills with one warp
SPILL_RECIPE = """format = 1
[bundle]
name = "spill"
version = "1"
targets = ["H100"]
[[kernel]]
name = "softmax"
source = "softmax.py:softmax_kernel"
grid = "132"
signature = { x_ptr = "*fp32", out_ptr = "*fp32", n = "i32" }
buckets = { n = [16384] }
[kernel.space]
BLOCK = [1024, 16384]
num_warps = [1, 4]
num_stages = [1]
"""


def test_spills_are_read_from_real_cubins_as_cuobjdump_reports_them(tmp_path: Path) -> None:
    """A row of 16,384 values held by one warp (512 per thread) must spill; 1,024 held by
    four warps must not. The stack frame read from the cubin is what NVIDIA's cuobjdump
    reports."""
    import subprocess

    from aot.costmodel.table import compile_for, facts_of, variant_for
    from tests.test_compile import cuobjdump

    plan, inst, bucket, configs = _softmax_plan(tmp_path, SPILL_RECIPE)
    wanted = [(inst, configs[k], bucket) for k in ((16384, 1), (1024, 4))]
    compiled = compile_for(plan, wanted, env_for(tmp_path / "cache"))
    stacks = {}
    for key in ((16384, 1), (1024, 4)):
        c = compiled[variant_for(inst, configs[key], bucket)]
        facts = facts_of(c)
        assert facts is not None
        (tmp_path / "k.cubin").write_bytes(c.cubin)
        usage = subprocess.run([cuobjdump(), "-res-usage", tmp_path / "k.cubin"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert f"STACK:{facts.local} " in usage, (facts, usage)
        stacks[key] = facts
    assert stacks[(16384, 1)].spills and stacks[(16384, 1)].local >= 1024
    assert not stacks[(1024, 4)].spills


def test_a_heuristic_pick_that_spills_gives_way_to_the_next_that_does_not(
    tmp_path: Path,
) -> None:
    """Without measurements, selection passes over a heuristic pick whose cubin spills (a
    16,384-wide row in one warp) for the next candidate that does not; a measured pick
    ships as measured, spilling or not (its time counts the spills). Before a pick's
    variants are compiled, selection asks for them; after a spilling one, for the next."""
    from aot.cache import CompileCache
    from aot.compile import compile_variants
    from aot.select import HEURISTIC, Pick, select, wanted_variants

    plan, inst, _, configs = _softmax_plan(tmp_path, SPILL_RECIPE)
    spilling, fine = configs[(16384, 1)], configs[(1024, 4)]
    compiled: dict[Any, Any] = {}

    def compile_wanted(chooser: Any) -> set[Any]:
        want = wanted_variants(plan, chooser, compiled)
        cache = CompileCache(tmp_path / "cache")
        compiled.update(compile_variants(plan, want, cache=cache, jobs=1, progress=False))
        return {v.config for _, v in want}

    heuristic = lambda i, b: [Pick(spilling, HEURISTIC), Pick(fine, HEURISTIC)]  # noqa: E731
    assert compile_wanted(heuristic) == {spilling}
    assert compile_wanted(heuristic) == {fine}  # the first spilled: the next is wanted
    assert compile_wanted(heuristic) == set()
    (chosen,) = select(plan, heuristic, compiled).choices[inst.key]
    assert chosen.config == fine and chosen.how == HEURISTIC

    measured = lambda i, b: [Pick(spilling, "measured on H100"), Pick(fine, HEURISTIC)]  # noqa: E731
    (chosen,) = select(plan, measured, compiled).choices[inst.key]
    assert chosen.config == spilling

    only_spills = lambda i, b: [Pick(spilling, HEURISTIC)]  # noqa: E731
    (chosen,) = select(plan, only_spills, compiled).choices[inst.key]
    assert chosen.config == spilling  # nothing better among the candidates: it ships


# the same with every argument specialized: its variants are "all %16" and generic
SPECIALIZED = SPILL_RECIPE.replace(
    "[kernel.space]", 'specializations = [{ "*" = 16 }]\n[kernel.space]'
)


def _softmax_plan(tmp_path: Path, recipe: str):  # type: ignore[no-untyped-def]
    """The plan of ``recipe`` (SPILL_RECIPE or a variation) over SOFTMAX, its one instance
    and bucket, and its candidates by (BLOCK, num_warps)."""
    from aot.plan import make_plan
    from aot.recipe import load

    (tmp_path / "softmax.py").write_text(SOFTMAX)
    (tmp_path / "r.toml").write_text(recipe)
    plan = make_plan(load(tmp_path / "r.toml"))
    (inst,) = plan.instances
    (bucket,) = inst.buckets
    configs = {(c.values()["BLOCK"], c.num_warps): c for c in inst.candidates(bucket)}
    return plan, inst, bucket, configs


def test_a_rows_facts_come_from_the_variant_a_call_runs_not_the_generic_one(
    tmp_path: Path,
) -> None:
    """Calls run a config's most specialized variant (the tuner timed that one), whose
    cubin can differ much from the generic one's: the grouped GEMM of the decode step
    spilled in every generic cubin and in none of the specialized ones that ran. The
    row's facts, and its spill flag, are the specialized variant's; the generic one's
    only where that failed to compile or fit; no row where both did."""
    from dataclasses import replace

    from aot.compile import Compiled
    from aot.costmodel.table import compile_for, facts_of, generic_for, rows, variant_for
    from aot.plan import GENERIC

    plan, inst, bucket, configs = _softmax_plan(tmp_path, SPECIALIZED)
    fine, spilling = configs[(1024, 4)], configs[(16384, 1)]
    v, g = variant_for(inst, fine, bucket), generic_for(inst, fine, bucket)
    assert v.spec == inst.specs[0] != GENERIC and g.spec == GENERIC
    compiled = compile_for(plan, [(inst, fine, bucket), (inst, spilling, bucket)],
                           env_for(tmp_path / "cache"))  # fmt: skip
    assert v in compiled and g not in compiled  # the generic one only where v fails
    spill, clean = compiled[variant_for(inst, spilling, bucket)], compiled[v]
    assert (f := facts_of(spill)) is not None and f.spills
    assert (f := facts_of(clean)) is not None and not f.spills
    h200 = resolve("H200")
    # Which cubin the row reads: the specialized key's, whatever the generic one holds.
    swapped = {v: replace(spill, variant=v), g: replace(clean, variant=g)}
    assert rows(inst, bucket, h200, [fine], swapped).spills == (True,)
    failed = {v: Compiled(v, False, reason="does not fit"), g: replace(spill, variant=g)}
    assert rows(inst, bucket, h200, [fine], failed).spills == (True,)
    failed[g] = Compiled(g, False, reason="does not fit")
    assert rows(inst, bucket, h200, [fine], failed).configs == ()


def test_the_absolute_sizes_are_worked_out_but_the_model_does_not_read_them(
    tmp_path: Path,
) -> None:
    """``features.SIZES`` (the grid's programs, tune.flops and tune.bytes, and those per
    program) are not model columns: they tell kernels apart rather than configs, and the
    model transfers better without them (benchmarks/RESULTS.md, issue 19). An experiment
    lays them out after the model's columns, which stay as they are."""
    from aot.costmodel.features import SIZES
    from aot.costmodel.table import rows

    sized = SPILL_RECIPE.replace(
        "buckets = { n = [16384] }",
        'buckets = { n = [16384] }\ntune = { flops = "5 * n", bytes = "8 * n" }',
    )
    _, inst, bucket, configs = _softmax_plan(tmp_path, sized)
    sizes = tuple(n for n, _ in SIZES)
    assert not set(sizes) & set(NAMES)
    h200, picked = resolve("H200"), list(configs.values())
    plain = rows(inst, bucket, h200, picked, {}, pending=True)
    more = rows(inst, bucket, h200, picked, {}, pending=True, names=(*NAMES, *sizes))
    for short, long in zip(plain.matrix, more.matrix, strict=True):
        assert len(short) == len(NAMES) and len(long) == len(NAMES) + len(sizes)
        assert long[: len(NAMES)] == pytest.approx(short, nan_ok=True)
        got = dict(zip(sizes, long[len(NAMES) :], strict=True))
        assert got == pytest.approx({
            "log2_programs": math.log2(132), "log2_flops": math.log2(5 * 16384),
            "log2_bytes": math.log2(8 * 16384),
            "log2_flops_per_program": math.log2(5 * 16384 / 132),
            "log2_bytes_per_program": math.log2(8 * 16384 / 132),
        })  # fmt: skip


def test_the_generic_variant_is_compiled_for_features_only_where_the_specialized_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build's features (``compile_for``) compile the specialized variant, then the
    generic one only for a config whose specialized variant failed."""
    from aot.compile import Compiled
    from aot.costmodel import table
    from aot.plan import GENERIC

    plan, inst, bucket, configs = _softmax_plan(tmp_path, SPECIALIZED)
    batches: list[list[object]] = []

    def compile_variants(plan, variants, **_):  # type: ignore[no-untyped-def]
        batches.append([v.spec for _, v in variants])
        return {v: Compiled(v, v.spec == GENERIC, reason="does not fit") for _, v in variants}

    monkeypatch.setattr(table, "compile_variants", compile_variants)
    fine = configs[(1024, 4)]
    out = table.compile_for(plan, [(inst, fine, bucket)], env_for(tmp_path / "cache"))
    assert batches == [[inst.specs[0]], [GENERIC]]
    assert [r.ok for r in out.values()] == [False, True]


# -- the model -------------------------------------------------------------------------


def synthetic(seed: int, buckets: int = 30) -> list[tuple[list[list[float]], list[float]]]:
    """Buckets whose time falls with occupancy and rises with spills, and a column of noise."""
    rng = random.Random(seed)
    i = NAMES.index
    out = []
    for _ in range(buckets):
        rows, times = [], []
        for _ in range(12):
            r = [rng.uniform(-1, 1) for _ in NAMES]
            occ, spill = rng.uniform(0.1, 1.0), float(rng.random() < 0.2)
            r[i("occupancy")], r[i("spills")] = occ, spill
            rows.append(r)
            times.append(1.0 / occ * (3.0 if spill else 1.0))
        out.append((rows, times))
    return out


def test_training_is_deterministic_and_a_model_round_trips_through_its_text() -> None:
    data = synthetic(0)
    a, b = cm.train(data, {"rounds": 30}), cm.train(data, {"rounds": 30})
    assert a.text == b.text
    again = cm.loads(a.text, "model.txt")
    rows = synthetic(1, 1)[0][0]
    assert again.score(rows) == a.score(rows)


def test_a_model_is_seeded_members_and_scores_their_mean() -> None:
    m = cm.train(synthetic(0), {"rounds": 20, "members": 3})
    assert len(m.boosters) == 3 and m.text.count(cm.MEMBER) == 3
    rows = synthetic(1, 1)[0][0]
    each = [b.predict(rows) for b in m.boosters]
    assert len({tuple(e) for e in each}) == 3  # other seeds, other trees
    assert m.score(rows) == pytest.approx([sum(c) / 3 for c in zip(*each, strict=True)])
    again = cm.loads(m.text, "model.txt")
    assert len(again.boosters) == 3 and again.score(rows) == m.score(rows)


def test_a_one_booster_text_without_member_lines_still_loads() -> None:
    m = cm.train(synthetic(0), {"rounds": 20, "members": 1})
    bare = m.boosters[0].model_to_string(num_iteration=-1)
    assert cm.MEMBER not in bare
    rows = synthetic(1, 1)[0][0]
    assert cm.loads(bare, "v1.txt").score(rows) == m.score(rows)


def test_the_model_learns_an_order_it_was_shown() -> None:
    # 60 buckets: with leaves of at least 100 rows, 30 buckets' 360 rows allow so few
    # splits that a column more or less (another draw of the noise) moved it from 18 to 15
    m = cm.train(synthetic(0, 60), {"rounds": 60})
    hits = 0
    for rows, times in synthetic(7, 20):
        scores = m.score(rows)
        hits += times[max(range(len(rows)), key=scores.__getitem__)] <= 1.5 * min(times)
    assert hits >= 16, hits  # a random pick lands within 1.5× about a third of the time


def test_a_groups_weight_decides_between_orders_that_disagree() -> None:
    """Half the buckets rank by occupancy, half against it: the model follows the half
    weighed more, so a kernel's weight in training is its say."""
    up = synthetic(0, 40)
    down = [(rows, [1.0 / t for t in times]) for rows, times in synthetic(1, 40)]
    col = NAMES.index("occupancy")

    def follows_occupancy(weights: list[float]) -> bool:
        m = cm.train(up + down, {"rounds": 40, "members": 1}, weights=weights)
        rows = [[0.0] * len(NAMES) for _ in range(2)]
        rows[0][col], rows[1][col] = 0.2, 0.9
        low, high = m.score(rows)
        return high > low

    assert follows_occupancy([5.0] * 40 + [0.2] * 40)
    assert not follows_occupancy([0.2] * 40 + [5.0] * 40)


def test_every_kernel_weighs_the_same_in_training() -> None:
    from aot.costmodel.dataset import kernel_weights

    examples = [SimpleNamespace(family="a")] * 6 + [SimpleNamespace(family="b")] * 2
    w = kernel_weights(examples)  # type: ignore[arg-type]
    assert sum(w[:6]) == pytest.approx(sum(w[6:])) == pytest.approx(4.0)
    assert sum(w) == pytest.approx(len(examples))  # a mean of 1: the loss keeps its scale
    assert kernel_weights([]) == []


def test_a_model_with_other_features_or_damaged_text_is_refused(tmp_path: Path) -> None:
    text = cm.train(synthetic(0), {"rounds": 5}).text
    other = text.replace("feature_names=log2_warps", "feature_names=log2_threads")
    with pytest.raises(cm.CostModelUnavailable, match="train it again"):
        cm.loads(other, "old.txt")
    (tmp_path / "bad.txt").write_text("tree\nnot a model")
    with pytest.raises(cm.CostModelUnavailable, match=r"bad\.txt"):
        cm.load_file(tmp_path / "bad.txt")
    with pytest.raises(cm.CostModelUnavailable, match="cannot read"):
        cm.load_file(tmp_path / "missing.txt")


def test_without_lightgbm_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    with pytest.raises(cm.CostModelUnavailable, match=r"pip install 'aotc\[build\]'"):
        cm.train(synthetic(0))


def test_the_shipped_model_loads_and_its_provenance_names_the_committed_databases() -> None:
    model = predict.shipped()
    assert model.version == cm.VERSION
    prov = json.loads(predict.SHIPPED.with_suffix(".json").read_text())
    assert prov["model"] == f"cost model v{cm.VERSION}" and prov["features"] == list(NAMES)
    root = Path(__file__).resolve().parents[1]
    for db in prov["databases"]:  # by path from the repository and content
        assert db["file"].startswith("benchmarks/data/"), db["file"]
        assert hashlib.sha256((root / db["file"]).read_bytes()).hexdigest() == db["sha256"]
    # each database's buckets counted once, by its path (two share a file name)
    assert sum(db["buckets"] for db in prov["databases"]) == prov["buckets"]
    assert prov["buckets"] > 50 and len(prov["kernels"]) >= 5


# -- builds ---------------------------------------------------------------------------


def env_for(cache: Path) -> Environment:
    """As a user's build: each kernel's own predictor (the suite's others use the
    heuristic, tests/conftest.py)."""
    return suite_env(cache, predict=None)


def predicting(recipe_dir: Path, how: str) -> Path:
    """tests/data/tune.toml with ``predict = how`` in its [kernel.tune]."""
    recipe = recipe_dir / "tune.toml"
    text = recipe.read_text().replace(
        'strategy = "model"', f'strategy = "model"\npredict = "{how}"'
    )
    recipe.write_text(text)
    return recipe


def tune_db(recipe_dir: Path, tmp_path: Path, worker: FakeWorker | None = None) -> Path:
    w = worker or FakeWorker()
    r = build(recipe_dir / "tune.toml", tmp_path / "t.aotc", env_for(tmp_path / "cache"),
              tmp_path, TuneOptions(gpus=[H100], worker_factory=lambda g: w))  # fmt: skip
    assert r.db is not None
    return r.db


def test_measured_buckets_resolve_to_the_recipe_that_defines_their_kernel(
    recipe_dir: Path, tmp_path: Path
) -> None:
    db = tune_db(recipe_dir, tmp_path)
    gs = groups(read_records(db), db.name)
    assert len(gs) == 2  # the two buckets of the H100
    cat = Catalog([recipe_dir])
    assert all(cat.resolve(g) is not None for g in gs)
    # An edited kernel is another kernel: its old measurements resolve to nothing.
    edited = tmp_path / "edited"  # a new path: kernel files are imported once per process
    shutil.copytree(recipe_dir, edited)
    src = edited / "kernels" / "small.py"
    src.write_text(src.read_text().replace("mask = offs < n", "mask = (offs < n) & (offs >= 0)"))
    assert all(Catalog([edited / "tune.toml"]).resolve(g) is None for g in gs)


def test_measurements_of_variants_the_recipe_no_longer_compiles_never_label_a_config(
    recipe_dir: Path,
) -> None:
    """A database kept across a recipe change holds times of the old variants under the
    config ids the recipe still plans (the record's key names no variant): the decode
    step's paged kernels, 2.5-4x slower before their strides were specialised."""
    cat = Catalog([recipe_dir / "tune.toml"])
    (plan,) = cat.plans
    inst = next(i for i in plan.instances if i.target.arch == "sm_90")
    bucket = inst.buckets[0]
    a, b, c = list(inst.candidates(bucket))[:3]

    def m(cfg: Config, kind: str = "bench", ms: float = 1.0, round_: int = 0,
          stale: bool = False) -> Record:  # fmt: skip
        now = min(variant_ids(inst, cfg))  # one of its variants (specialised or generic)
        ran = f"{cfg.id}-000000" if stale else now  # another specialisation's hash
        return Record(kernel="scale", source=plan.sources["scale"].cache_key, triton="3.6.0",
                      device="NVIDIA H100 80GB HBM3", arch="sm_90", dtypes={},
                      problem=problem(inst, bucket), config=cfg.id, kind=kind, ok=True, ms=ms,
                      round=round_, extra={"variant": ran})  # fmt: skip

    records = [
        m(a, ms=1.0), m(a, "final", 5.0, 0, stale=True), m(a, "final", 5.0, 1, stale=True),
        m(b, ms=9.0, stale=True), m(b, "final", 2.0, 0), m(b, "final", 2.2, 1),
        m(c, ms=0.5, stale=True),
        Record(**{**m(c, "verify").__dict__, "extra": {}}),  # names no variant: kept
    ]  # fmt: skip
    kept, dropped = cat.current(records)
    assert dropped == {"scale": 4} and len(kept) == 4
    (g,) = groups(kept, "db")
    # a: its benchmark; b: its rounds (its benchmark was the old variant's); c: unknown
    assert dict(g.times) == {a.id: 1.0, b.id: 2.1}
    assert cat.resolve(g) is not None


def test_a_cpu_build_asking_for_the_model_ships_its_predictions(
    recipe_dir: Path, tmp_path: Path
) -> None:
    recipe = predicting(recipe_dir, "cost-model")
    r = build(recipe, tmp_path / "p.aotc", env_for(tmp_path / "cache"), tmp_path)
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    hows = {c.how for inst in m.kernels[0].instances for c in inst.choices}
    assert hows == {predict.PREDICTED}
    assert r.decided["predicted"] == 6 and sum(r.decided.values()) == 6
    assert predict.PREDICTED in r.report.read_text()


def _hows(bundle: Path) -> set[str]:
    with BundleFile(bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    return {c.how for inst in m.kernels[0].instances for c in inst.choices}


def test_build_predict_overrides_what_each_kernel_asks(recipe_dir: Path, tmp_path: Path) -> None:
    # `aotc build --predict cost-model`: a recipe that names no predictor ships the model's
    # picks; `--predict heuristic`: one that asks for the model ships the heuristic's.
    out = invoke(["build", str(recipe_dir / "tune.toml"), "-o", str(tmp_path / "m.aotc"),
                  "--predict", "cost-model"], tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    assert _hows(tmp_path / "m.aotc") == {predict.PREDICTED}
    env = dataclasses.replace(env_for(tmp_path / "cache"), predict="heuristic")
    r = build(predicting(recipe_dir, "cost-model"), tmp_path / "h.aotc", env, tmp_path)
    assert _hows(r.bundle) == {"untuned (heuristic)"}


def test_a_cpu_build_ships_the_models_picks_unless_told_otherwise(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """The cost model is the default predictor: a recipe naming none ships its picks;
    AOTC_PREDICT or a recipe's ``predict = "heuristic"`` ships the heuristic's; a bad
    AOTC_PREDICT is refused, naming it, and nothing is written."""
    recipe = recipe_dir / "tune.toml"
    assert "predict" not in recipe.read_text()
    out = invoke(["build", str(recipe), "-o", str(tmp_path / "d.aotc")], tmp_path)
    assert out.exit_code == 0, out.output
    assert _hows(tmp_path / "d.aotc") == {predict.PREDICTED}
    assert "6 predicted" in out.output
    out = invoke(["build", str(recipe), "-o", str(tmp_path / "e.aotc")], tmp_path,
                 {"AOTC_PREDICT": "heuristic"})  # fmt: skip
    assert out.exit_code == 0, out.output
    assert _hows(tmp_path / "e.aotc") == {"untuned (heuristic)"}
    out = invoke(["build", str(recipe), "-o", str(tmp_path / "f.aotc")], tmp_path,
                 {"AOTC_PREDICT": "costmodel"})  # fmt: skip
    assert out.exit_code == 2 and "AOTC_PREDICT='costmodel'" in out.output, out.output
    assert "Traceback" not in out.output and not (tmp_path / "f.aotc").exists()
    out = invoke(["build", str(predicting(recipe_dir, "heuristic")), "-o",
                  str(tmp_path / "g.aotc")], tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    assert _hows(tmp_path / "g.aotc") == {"untuned (heuristic)"}


def invoke(args: list[str], tmp_path: Path, extra: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """``aotc ARGS`` in this process, with a private cache and no AOTC_PREDICT (as a user
    runs it), plus ``extra`` environment; never a traceback."""
    env = {"AOTC_CACHE_DIR": str(tmp_path / "cache"), "AOTC_NO_PROGRESS": "1",
           "AOTC_PREDICT": None, **(extra or {})}  # fmt: skip
    r = CliRunner().invoke(cli, args, env=env, prog_name="aotc")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    return r


def test_the_tuner_measures_candidates_in_the_models_order(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    predicting(recipe_dir, "cost-model")
    orders: list[predict.Ordered | None] = []
    real = predict.tuning_order

    def spy(*args):  # type: ignore[no-untyped-def]
        orders.append(real(*args))
        return orders[-1]

    monkeypatch.setattr(predict, "tuning_order", spy)
    priors: list[Any] = []
    make = strategies.make

    def made(*args, **kw):  # type: ignore[no-untyped-def]
        priors.append(kw.get("prior"))
        return make(*args, **kw)

    monkeypatch.setattr(strategies, "make", made)
    worker = FakeWorker()
    tune_db(recipe_dir, tmp_path, worker)
    benched = [m["spec"]["instances"][0]["variants"][0] for m in worker.requests
               if m["op"] == "bench"]  # fmt: skip
    assert len(orders) == 2 and orders[0] is not None  # one per bucket of the H100
    first = orders[0].configs
    assert len(first) == 16  # every candidate, compiled or not yet
    # the strategy refits the model's scores to the bucket's measurements as they come
    assert priors == [o.scores for o in orders if o is not None]
    v = benched[0]
    assert (v["meta"]["BLOCK"], v["num_warps"]) == (first[0].values()["BLOCK"],
                                                    first[0].num_warps)  # fmt: skip


def test_the_tuners_order_never_waits_for_a_compile(tmp_path: Path) -> None:
    """Nothing compiled yet: every candidate in the compile-free order (the build's first
    pass's); one compiled: its facts join its row. A candidate whose specialized variant
    failed and whose generic one is still compiling comes last."""
    from aot.compile import Compiled
    from aot.costmodel.table import variants_for

    _, inst, bucket, configs = _softmax_plan(tmp_path, SPECIALIZED)
    model = predict.shipped()
    ordered = predict.tuning_order(inst, bucket, lambda v: None)
    assert ordered is not None
    cold = ordered.configs
    assert cold == predict.shortlist(model, inst, bucket) and len(cold) == len(configs)
    # the scores behind the order, which the tuner's strategy refits: best first
    assert [ordered.scores[c] for c in cold] == sorted(ordered.scores.values(), reverse=True)
    failed = cold[0]
    spec, generic = variants_for(inst, failed, bucket)
    assert spec != generic
    done = {spec: Compiled(spec, False, reason="does not fit")}
    again = predict.tuning_order(inst, bucket, done.get)
    assert again is not None
    warm = again.configs
    assert warm[-1] == failed and sorted(map(str, warm)) == sorted(map(str, cold))
    assert failed not in again.scores  # no row, no score: the strategy takes it as the least


def test_without_lightgbm_a_build_asking_for_the_model_says_why_it_fell_back(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "lightgbm", None)
    predict.shipped.cache_clear()
    try:
        r = build(predicting(recipe_dir, "cost-model"), tmp_path / "h.aotc",
                  env_for(tmp_path / "cache"), tmp_path)  # fmt: skip
    finally:
        predict.shipped.cache_clear()
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    (how,) = {c.how for inst in m.kernels[0].instances for c in inst.choices}
    assert how.startswith("untuned (heuristic; cost model unavailable: lightgbm is not installed")
    assert r.decided["heuristic (cost model unavailable)"] == 6  # the summary line says so


def test_the_learned_order_shortens_the_default_patience(recipe_dir: Path) -> None:
    from aot.recipe import load

    (kernel,) = load(predicting(recipe_dir, "cost-model")).kernels
    assert kernel.tune.patience == 6  # the recipe's own
    assert kernel.tune.warm_patience == 4  # the learned order's default (15 otherwise)


def test_a_misspelt_predictor_is_refused_with_a_suggestion(recipe_dir: Path) -> None:
    recipe = predicting(recipe_dir, "costmodel")
    out = invoke(["build", str(recipe), "-o", str(recipe_dir / "x.aotc")], recipe_dir)
    assert out.exit_code == 2
    assert "scale.tune.predict" in out.output and "did you mean 'cost-model'" in out.output


def test_spilling_candidates_come_last_whatever_the_model_says() -> None:
    class Likes:
        """A model that scores the first row best."""

        version = 1

        def score(self, matrix):  # type: ignore[no-untyped-def]
            return [-float(i) for i in range(len(matrix))]

    rows = [[0.0] * len(NAMES)] * 3
    from aot.costmodel.evaluate import order

    assert order(Likes(), rows, [True, False, False])[0] == 1  # type: ignore[arg-type]
    assert order(Likes(), rows, [True, False, False]) == [1, 2, 0]  # type: ignore[arg-type]
    assert order(Likes(), rows, [True, True, True])[0] == 0  # type: ignore[arg-type]


def test_the_prefilter_compiles_a_shortlist_and_never_ships_a_spill_it_can_avoid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a GPU, the model first scores every candidate with what it knows before
    compiling, and compiles only the best ``PREFILTER`` per bucket; where each of those
    spills, the next ``PREFILTER``, until one does not. A model that likes the widest
    block in the fewest warps puts the 16,384-wide row in one warp, which spills, first:
    with a shortlist of one, two of the four candidates are compiled and the pick is the
    second, which does not spill; the spilling one comes last."""
    from aot.costmodel.table import facts_of, variant_for

    class WideFew:
        def score(self, matrix):  # type: ignore[no-untyped-def]
            i = NAMES.index
            return [r[i("log2_block")] - r[i("log2_warps")] for r in matrix]

        score_pending = score

    plan, inst, bucket, configs = _softmax_plan(tmp_path, SPILL_RECIPE)
    asked: list[Any] = []
    real = predict.compile_for

    def spy(plan, wanted, env, label):  # type: ignore[no-untyped-def]
        asked.extend(c for _, c, _ in wanted)
        out = real(plan, wanted, env, label)
        compiled.update(out)
        return out

    compiled: dict[Any, Any] = {}
    monkeypatch.setattr(predict, "compile_for", spy)
    monkeypatch.setattr(predict, "model_for", lambda path: WideFew())
    monkeypatch.setattr(predict, "PREFILTER", 1)
    env = dataclasses.replace(env_for(tmp_path / "cache"), predict="cost-model")
    choose = predict.chooser(plan, env, lambda i, b: [])
    picks = [p.config for p in choose(inst, bucket)]
    spilling = configs[(16384, 1)]
    assert asked == [spilling, configs[(16384, 4)]]  # the shortlist, then one more
    assert len(set(asked)) < len(list(inst.candidates(bucket)))
    facts = facts_of(compiled[variant_for(inst, picks[0], bucket)])
    assert facts is not None and not facts.spills
    assert picks[-1] == spilling and set(picks) == set(configs.values())


def test_the_build_compiles_the_compile_free_rankers_first_and_ships_the_full_ones_pick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a GPU the compile-free rankers (trained on rows whose cubins are unknown)
    say which candidates to compile, and the full rankers (trained on compiled rows) pick
    among those. Here the compile-free ones like a narrow block in many warps and the full
    ones a wide block in few: with a shortlist of two, the two 1024-wide blocks are
    compiled, and the full rankers' favourite of them ships (ordered by the full rankers
    alone, the shortlist would have been the two 16,384-wide ones)."""

    class TwoMinds:
        def score(self, matrix):  # type: ignore[no-untyped-def]
            i = NAMES.index
            return [r[i("log2_block")] - r[i("log2_warps")] for r in matrix]

        def score_pending(self, matrix):  # type: ignore[no-untyped-def]
            i = NAMES.index
            return [r[i("log2_warps")] - r[i("log2_block")] for r in matrix]

    plan, inst, bucket, configs = _softmax_plan(tmp_path, SPILL_RECIPE)
    asked: list[Any] = []
    real = predict.compile_for

    def spy(plan, wanted, env, label):  # type: ignore[no-untyped-def]
        asked.extend(c for _, c, _ in wanted)
        return real(plan, wanted, env, label)

    monkeypatch.setattr(predict, "compile_for", spy)
    monkeypatch.setattr(predict, "model_for", lambda path: TwoMinds())
    monkeypatch.setattr(predict, "PREFILTER", 2)
    env = dataclasses.replace(env_for(tmp_path / "cache"), predict="cost-model")
    picks = [p.config for p in predict.chooser(plan, env, lambda i, b: [])(inst, bucket)]
    assert asked == [configs[(1024, 4)], configs[(1024, 1)]]
    assert picks[0] == configs[(1024, 1)]


def test_a_models_compile_free_rankers_survive_its_text_and_score_unknown_cubins() -> None:
    """A model's text holds its full rankers and, after a line of their own, its
    compile-free ones: loaded back, each kind scores as trained. A text with no
    compile-free ranker (cost model v1, a model trained before them) scores rows of unknown
    cubins with its full ones; one with only compile-free rankers is refused."""
    full = cm.train(synthetic(0), {"rounds": 5, "members": 2})
    free = cm.train(synthetic(1), {"rounds": 5, "members": 1})
    back = cm.loads(cm.with_pending(full, free).text, "m.txt")
    assert (len(back.boosters), len(back.pending)) == (2, 1)
    rows = [r for rs, _ in synthetic(2, 3) for r in rs]
    assert back.score(rows) == full.score(rows) != free.score(rows)
    assert back.score_pending(rows) == free.score(rows)
    legacy = cm.loads(full.text, "v1.txt")
    assert legacy.pending == () and legacy.score_pending(rows) == full.score(rows)
    with pytest.raises(cm.CostModelUnavailable, match=r"only\.txt: only compile-free"):
        cm.loads(free.text.replace(cm.MEMBER, cm.PENDING), "only.txt")
    shipped = predict.shipped()
    assert len(shipped.boosters) == len(shipped.pending) == cm.MEMBERS


def test_the_replayed_shortlist_widens_past_spills_and_picks_by_the_full_scores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``evaluate.shortlisted`` replays the build on a bucket's rows: the compile-free
    scores' best ``PREFILTER`` compiled, more while all of those spill, then the full
    scores' best of them that does not spill."""
    from aot.costmodel.evaluate import shortlisted

    monkeypatch.setattr(predict, "PREFILTER", 2)
    full = [0.0, 1.0, 2.0, 3.0, 9.0]  # row 4, the full scores' best, is never shortlisted
    first = [5.0, 1.0, 4.0, 3.0, 0.0]  # compile-free order: 0, 2, 3, 1, 4
    assert shortlisted(full, first, [False] * 5) == 2  # of rows 0 and 2
    assert shortlisted(full, first, [True, False, True, False, False]) == 3  # 0, 2 spill
    assert shortlisted(full, first, [True] * 5) == 4  # all spill: the best of all
    # another size, as benchmarks/costmodel_bagged.py replays: 3 compiled, 3 more past spills
    assert shortlisted(full, first, [False] * 5, compiled=3) == 3  # of rows 0, 2 and 3
    assert shortlisted(full, first, [True, False, True, True, False], compiled=3) == 4


def test_eval_command_scores_each_kernel_held_out_and_in_sample(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """`aotc cost-model eval` over two kernels' databases: each held out in turn (a table
    row each), then the in-sample line, every figure a ratio of measured times."""
    src = recipe_dir / "kernels" / "small.py"  # a second kernel: another source hash
    (recipe_dir / "kernels" / "other.py").write_text(
        src.read_text().replace("mask = offs < n", "mask = (offs < n) & (offs >= 0)"))  # fmt: skip
    recipe = (recipe_dir / "tune.toml").read_text().replace('"tunetest"', '"other"')
    (recipe_dir / "other.toml").write_text(recipe.replace("kernels/small.py", "kernels/other.py"))
    dbs = []
    for name in ("tune", "other"):
        r = build(recipe_dir / f"{name}.toml", tmp_path / f"{name}.aotc",
                  env_for(tmp_path / "cache"), tmp_path,
                  TuneOptions(gpus=[H100], worker_factory=lambda g: FakeWorker()))  # fmt: skip
        assert r.db is not None
        dbs.append(str(r.db))
    assert len(set(dbs)) == 2
    out = invoke(["cost-model", "eval", *dbs, "--recipe", str(recipe_dir)], tmp_path)
    assert out.exit_code == 0, out.output
    assert "leave-one-kernel-out over 2 kernels, 4 buckets" in out.output
    assert sum(line.startswith("| scale (") for line in out.output.splitlines()) == 2
    tail = re.search(r"in sample \(.*\): geomean ([\d.]+)×, worst ([\d.]+)×, within 1\.25× "
                     r"(\d)/4", out.output)  # fmt: skip
    assert tail is not None, out.output
    assert 1.0 <= float(tail[1]) <= float(tail[2])


def test_the_training_script_trains_on_what_the_shipped_model_names(tmp_path: Path) -> None:
    """benchmarks/costmodel_train.py, run bare, retrains the shipped model: its databases
    are those the provenance names, in order; what --add and --recipe give follows."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    from costmodel_train import SHIPPED, train_args

    assert SHIPPED == predict.SHIPPED
    prov = json.loads(predict.SHIPPED.with_suffix(".json").read_text())
    args = train_args([], [], SHIPPED)
    assert args[:2] == ["cost-model", "train"]
    assert args[-2:] == ["-o", f"aot/costmodel/data/model-v{cm.VERSION}.txt"]
    dbs = args[2 : args.index("--recipe")]
    assert dbs == [db["file"] for db in prov["databases"]]
    mine = tmp_path / "mine.tunedb.jsonl"
    more = train_args([mine], [tmp_path / "r.toml"], tmp_path / "m.txt")
    assert more[2 : 2 + len(dbs) + 1] == [*dbs, os.path.relpath(mine, root)]
    assert more[-4:] == ["--recipe", os.path.relpath(tmp_path / "r.toml", root), "-o",
                         os.path.relpath(tmp_path / "m.txt", root)]  # fmt: skip


def test_provenance_counts_two_databases_of_one_file_name_apart(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tune_db(recipe_dir, tmp_path)
    monkeypatch.chdir(tmp_path)  # the databases named by relative paths, as provenance keeps them
    lines = db.read_text().splitlines()
    one = json.loads(lines[0])["problem"]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / db.name).write_text(db.read_text())
    # b: the same kernel's records at one of the two buckets only
    (tmp_path / "b" / db.name).write_text(
        "".join(x + "\n" for x in lines if json.loads(x)["problem"] == one)
    )
    out = invoke(["cost-model", "train", f"a/{db.name}", f"b/{db.name}", "--recipe",
                  str(recipe_dir), "-o", str(tmp_path / "m.txt")], tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    prov = json.loads((tmp_path / "m.json").read_text())
    assert [(d["file"], d["buckets"]) for d in prov["databases"]] == [
        (f"a/{db.name}", 2), (f"b/{db.name}", 1)]  # fmt: skip
    assert prov["buckets"] == 3


def test_train_and_eval_commands(recipe_dir: Path, tmp_path: Path) -> None:
    db = tune_db(recipe_dir, tmp_path)
    out = invoke(["cost-model", "train", str(db), "--recipe", str(recipe_dir),
                  "-o", str(tmp_path / "m.txt")], tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "1 kernels, 2 buckets" in out.output
    trained = cm.load_file(tmp_path / "m.txt")
    assert trained.version == cm.VERSION
    assert len(trained.boosters) == len(trained.pending) == cm.MEMBERS  # full, compile-free
    prov = json.loads((tmp_path / "m.json").read_text())
    assert prov["databases"] == [{"file": str(db), "sha256": hashlib.sha256(db.read_bytes())
                                  .hexdigest(), "buckets": 2}]  # fmt: skip
    assert prov["unmatched_buckets"] == 0 and prov["stale_records"] == {}
    # Leave-one-kernel-out needs a second kernel to train on: said, not a traceback.
    out = invoke(["cost-model", "eval", str(db), "--recipe", str(recipe_dir)], tmp_path)
    assert out.exit_code == 2 and "at least two kernels" in out.output
    out = invoke(["cost-model", "train", str(tmp_path / "nope.jsonl"),
                  "-o", str(tmp_path / "n.txt")], tmp_path)  # fmt: skip
    assert out.exit_code == 2 and "nope.jsonl" in out.output
    assert not (tmp_path / "n.txt").exists()
    # Damaged databases: named, exit 2, never taken for an interrupt (click reads a stray
    # EOFError, which a truncated gzip stream raises, as Ctrl-D).
    packed = gzip.compress(db.read_bytes())
    damaged = {"cut.jsonl.gz": packed[: len(packed) // 2], "junk.jsonl.gz": b"\x00\x01junk",
               "binary.jsonl": b"\xff\xfe\x00 not text\n"}  # fmt: skip
    for name, data in damaged.items():
        (tmp_path / name).write_bytes(data)
        out = invoke(["cost-model", "train", str(tmp_path / name), "--recipe", str(recipe_dir),
                      "-o", str(tmp_path / "d.txt")], tmp_path)  # fmt: skip
        assert out.exit_code == 2 and f"{tmp_path / name}" in out.output, (name, out.output)
        assert not (tmp_path / "d.txt").exists()


def test_evaluation_counts_each_bucket_once_and_each_kernel_of_one_source() -> None:
    """Leave-one-kernel-out scores each bucket once: the same kernel's bucket in two
    databases (the example's and the exhaustive pass's matmul) counts once, on the one
    that timed more configs; a causal and a non-causal attention built from one source and
    measured in one database are two kernels, and both count."""
    from aot.costmodel.data import Group
    from aot.costmodel.dataset import Dataset, Example
    from aot.costmodel.evaluate import evaluated
    from aot.costmodel.table import Rows

    def example(db: str, kernel: str, n: int, source: str = "s1") -> Example:
        group = Group(db=db, kernel=kernel, source=source, device="H200", arch="sm_90",
                      dtypes=(("T", "bf16"),), problem=(("M", 64),),
                      times={str(i): 1.0 + i for i in range(n)})  # fmt: skip
        rows = Rows(configs=(), matrix=(), spills=())
        return Example(group=group, family=source, label=kernel, rows=rows, pending=rows,
                       times=tuple(group.times.values()), heuristic=())  # fmt: skip

    small, dense = example("example.jsonl", "matmul", 3), example("exhaustive.jsonl", "matmul", 9)
    causal, plain = (
        example("attn.jsonl", "causal", 4, "s2"),
        example("attn.jsonl", "plain", 4, "s2"),
    )
    ds = Dataset(examples=(small, dense, causal, plain), databases=(), records=0, unmatched=0)
    kept = evaluated(ds)
    assert dense in kept and small not in kept
    assert causal in kept and plain in kept and len(kept) == 3


def test_a_build_uses_a_model_its_user_trained_and_refuses_one_it_cannot_use(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """`aotc cost-model train` on the user's databases, then `aotc build --cost-model`:
    each bucket is recorded as predicted by that file. A damaged model is named and stops
    the build (exit 2, no bundle), never a silent fall back to the heuristic."""
    from aot.env import from_environ

    db = tune_db(recipe_dir, tmp_path)
    model = tmp_path / "mine.txt"
    out = invoke(["cost-model", "train", str(db), "--recipe", str(recipe_dir),
                  "-o", str(model)], tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    recipe = predicting(recipe_dir, "cost-model")
    bundle = tmp_path / "mine.aotc"
    out = invoke(["build", str(recipe), "-o", str(bundle), "--no-tune",
                  "--cost-model", str(model)], tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    with BundleFile(bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    hows = {c.how for inst in m.kernels[0].instances for c in inst.choices}
    assert hows == {f"predicted (cost model v{cm.VERSION}: mine.txt)"}
    damaged = tmp_path / "damaged.txt"
    damaged.write_text(model.read_text()[:200])
    other = tmp_path / "other.aotc"
    out = invoke(["build", str(recipe), "-o", str(other), "--no-tune",
                  "--cost-model", str(damaged)], tmp_path)  # fmt: skip
    assert out.exit_code == 2 and str(damaged) in out.output, out.output
    assert not other.exists()
    assert from_environ({"AOTC_COST_MODEL": str(model)}).cost_model == model
    assert from_environ({}).cost_model is None


def test_a_rows_warps_are_those_its_block_launches(tmp_path: Path) -> None:
    """A warp-specialised variant runs more warps than its config asked for (12 for 4 on
    sm_90, recorded as the compiled kernel's): its warp features and its residency count
    those, or a 12-warp block would look as light as a 4-warp one."""
    from dataclasses import replace

    from aot.costmodel.table import compile_for, facts_of, rows, variant_for

    plan, inst, bucket, configs = _softmax_plan(tmp_path, SPECIALIZED)
    fine = configs[(1024, 4)]
    v = variant_for(inst, fine, bucket)
    compiled = compile_for(plan, [(inst, fine, bucket)], env_for(tmp_path / "cache"))
    asked = compiled[v]
    launched = replace(asked, num_warps=12)
    assert (f := facts_of(launched)) is not None and f.warps == 12
    i = NAMES.index
    (as_asked,) = rows(inst, bucket, resolve("H200"), [fine], {v: asked}).matrix
    (as_run,) = rows(inst, bucket, resolve("H200"), [fine], {v: launched}).matrix
    assert as_asked[i("log2_warps")] == 2.0 and as_run[i("log2_warps")] == math.log2(12)
    h200 = resolve("H200")
    for row, warps in ((as_asked, 4), (as_run, 12)):  # residency for the threads launched
        assert row[i("occupancy")] == blocks_per_sm(h200, warps * 32, f) * warps / 64


def synthetic_kernel(
    family: str, buckets: list[tuple[list[list[float]], list[float]]]
) -> list[Any]:
    """``dataset.Example``s of one made-up kernel, a bucket per (rows, times), none spilling:
    what leave one kernel out reads of a measured kernel."""
    from aot.costmodel.data import Group
    from aot.costmodel.dataset import Example
    from aot.costmodel.table import Rows

    out = []
    for n, (rows, times) in enumerate(buckets):
        ids = [str(i) for i in range(len(rows))]
        measured = dict(zip(ids, times, strict=True))
        group = Group(db="d", kernel=family, source=family, device="H200", arch="sm_90",
                      dtypes=(), problem=(("n", n),), times=measured)  # fmt: skip
        configs = tuple(SimpleNamespace(id=i) for i in ids)
        rw = Rows(configs, tuple(rows), tuple(False for _ in rows))  # type: ignore[arg-type]
        out.append(Example(group, family, family, rw, rw, tuple(times), tuple(ids)))
    return out


def test_in_sample_tells_a_features_limit_from_a_kernel_never_seen() -> None:
    """Two kernels whose configs rank in opposite orders of occupancy, a column telling the
    kernels apart: one model trained on both picks both well (the features suffice), while
    each held out is picked by the other's order, backwards."""
    from aot.costmodel.dataset import Dataset
    from aot.costmodel.evaluate import in_sample, leave_one_out

    kernel = NAMES.index("log2_peak_tflops")
    examples = []
    for family, flip, seed in (("a", False, 0), ("b", True, 1)):
        examples += synthetic_kernel(family, [
            ([[*r[:kernel], float(flip), *r[kernel + 1 :]] for r in rows],
             [1.0 / t if flip else t for t in times])
            for rows, times in synthetic(seed, 30)
        ])  # fmt: skip
    ds = Dataset(examples=tuple(examples), databases=(), records=0, unmatched=0)
    params = {"rounds": 60, "members": 1}
    inside, held = in_sample(ds, params), leave_one_out(ds, params)
    assert [r.example for r in inside] == [r.example for r in held]  # one order, pairable
    within = [sum(r.model <= 1.5 for r in rs) for rs in (inside, held)]
    assert within[0] >= 45 and within[1] <= 25, within
    for r in held:  # the configs scored, by id (benchmarks/costmodel_remeasured.py reads them)
        ids, times = [c.id for c in r.example.rows.configs], r.example.times
        assert times[ids.index(r.pick)] / min(times) == r.model
        assert times[ids.index(r.fastest)] == min(times)


def test_the_learning_curve_draws_each_held_out_kernels_training_kernels_from_the_others() -> None:
    """benchmarks/costmodel_curve.py: a seeded draw of the other kernels per held-out
    kernel, never the held-out one; the whole draw is leave one kernel out itself."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from costmodel_curve import drawn, held_out

    from aot.costmodel.dataset import Dataset
    from aot.costmodel.evaluate import leave_one_out

    fams = ["a", "b", "c", "d", "e"]
    half = drawn(fams, "c", 0.5, 1)
    assert len(half) == 2 and "c" not in half and half <= set(fams)
    assert drawn(fams, "c", 0.5, 1) == half  # seeded: a run repeats
    assert {frozenset(drawn(fams, "c", 0.5, s)) for s in range(20)} != {frozenset(half)}
    assert drawn(fams, "c", 1.0, 1) == {"a", "b", "d", "e"} and len(drawn(fams, "c", 0.01, 1)) == 1
    examples = [e for f, seed in (("a", 0), ("b", 1), ("c", 2))
                for e in synthetic_kernel(f, synthetic(seed, 10))]  # fmt: skip
    ds = Dataset(examples=tuple(examples), databases=(), records=0, unmatched=0)
    params = {"rounds": 20, "members": 1}
    every = held_out(ds, 1.0, 0, params)
    assert [(r.example, r.pick) for r in every] == [
        (r.example, r.pick) for r in leave_one_out(ds, params)
    ]
    assert [r.example for r in held_out(ds, 0.5, 3, params)] == [r.example for r in every]


def test_a_bucket_measured_again_is_read_in_every_other_database_that_timed_both_configs() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from costmodel_remeasured import SCORED, bucket, readings

    from aot.costmodel.data import Group

    scored = sorted(SCORED)[0]  # a scored database's path under benchmarks/data
    row = {"name": "k", "source": "s", "arch": "sm_90", "dtypes": {"T": "fp16"},
           "problem": {"M": 64, "N": 8}, "db": scored, "pick": "p", "fastest": "f",
           "model": 2.0}  # fmt: skip
    key = bucket(row)
    assert key == ("k", "s", "sm_90", (("T", "fp16"),), (("M", 64), ("N", 8)))

    def group(times: dict[str, float]) -> Group:
        return Group("x", "k", "s", "H200", "sm_90", key[3], key[4], times)

    found = [
        (scored, group({"p": 2.0, "f": 1.0})),  # the run the row was scored on: not read
        ("again/a.tunedb.jsonl.gz", group({"p": 1.0, "f": 1.1, "o": 0.9})),
        ("again/b.tunedb.jsonl.gz", group({"p": 1.0, "o": 0.5})),  # the fastest not timed
        # another database of the same file name (two scored ones share one): read
        (f"other/{Path(scored).name}", group({"p": 3.0, "f": 1.0})),
    ]
    assert [(x.db, x.pick, x.configs) for x in readings(row, found)] == [
        ("again/a.tunedb.jsonl.gz", 1.0 / 0.9, 3),
        (f"other/{Path(scored).name}", 3.0, 2),
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("not json", "not costmodel_eval.py's --json output"),
        ('{"loo": [{"db": "h200-gallery/splitk.tunedb.jsonl.gz", "model": 1.0}]}',
         "no config ids in it"),
        # a file name alone, as written before the databases' paths: which splitk?
        ('{"loo": [{"db": "splitk.tunedb.jsonl.gz", "pick": "p", "fastest": "f"}]}',
         "scored on databases other than the committed ones"),
    ],
)  # fmt: skip
def test_remeasured_refuses_an_eval_file_it_cannot_read_by_name(
    tmp_path: Path, text: str, said: str
) -> None:
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "costmodel_remeasured.py"
    (tmp_path / "eval.json").write_text(text)
    proc = subprocess.run([sys.executable, str(script), "--eval", str(tmp_path / "eval.json")],
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 1 and said in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and str(tmp_path / "eval.json") in proc.stderr


REMEASURED = [
    ("remeasure_matmul.toml", "recipes/example.toml"),
    ("remeasure_moe.toml", "recipes/gallery/moe.toml"),
]


@pytest.mark.parametrize(("again", "scored"), REMEASURED)
def test_a_remeasure_recipe_times_the_kernel_and_space_its_scored_recipe_timed(
    again: str, scored: str
) -> None:
    """benchmarks/recipes/remeasure_*.toml measure scored buckets a second time, every config:
    the same kernel source, space and launch as the recipe whose database was scored, or the
    records are another kernel's or another config's."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    paths = (root / "benchmarks" / "recipes" / again, root / scored)
    (a,), kernels = (tomllib.loads(p.read_text())["kernel"] for p in paths)
    b = next(k for k in kernels if k["name"] == a["name"])

    def source(path: Path, k: dict[str, Any]) -> tuple[Path, str]:
        file, fn = k["source"].split(":")
        return (path.parent / file).resolve(), fn

    assert source(paths[0], a) == source(paths[1], b)
    for key in ("space", "fixed", "sizes", "grid", "constraints", "specializations", "host"):
        assert a.get(key) == b.get(key), key
    (dim,) = a["buckets"]
    assert set(a["buckets"][dim]) <= set(b["buckets"][dim])
    tune = a["tune"]
    assert tune["strategy"] == "grid" and tune["budget"] >= 1000 and tune["patience"] >= 1000


# -- calibrated on the instance's measured buckets ------------------------------------


def _configs(*pairs: tuple[int, int]) -> list[Config]:
    return [Config((("BLOCK", b),), num_warps=w, num_stages=1) for b, w in pairs]


def test_scores_calibrated_on_measured_buckets_follow_what_was_measured_near_and_not_far() -> None:
    """The model likes few warps; two measured buckets near n = 8192 say 4 warps run
    fastest, whatever the model thought: calibrated, the 4-warp config comes first at
    8192, and at a bucket a million times larger the measurements weigh almost nothing
    (shrunk) against a strong model score. No measured config: the scores as given;
    measurements that run against the scores drop them (b = 0) rather than invert them."""
    from aot.costmodel.calibrate import Measured, calibrated

    one, two, four = _configs((512, 1), (512, 2), (512, 4))
    model = {one: 3.0, two: 2.0, four: 1.0}  # higher: predicted faster
    times = {one: 3.0, two: 2.0, four: 1.0}
    near = [Measured({"n": 4096}, times, model), Measured({"n": 16384}, times, model)]
    at = calibrated({"n": 8192}, model, near)
    assert max(at, key=at.__getitem__) == four
    far = calibrated({"n": 8192 * 2**20}, {one: 30.0, two: 20.0, four: 10.0}, near)
    assert max(far, key=far.__getitem__) == one
    assert calibrated({"n": 8192}, model, []) == model
    assert calibrated({"n": 8192}, model, [Measured({"n": 4096}, {one: 1.0}, model)]) == model
    # times that follow the scores exactly: calibrated, the order is the model's
    agree = {one: 1.0, two: 2.0, four: 3.0}
    same = calibrated({"n": 8192}, model, [Measured({"n": 4096}, agree, model)] * 2)
    assert sorted(same, key=same.__getitem__) == [four, two, one]


def test_a_build_calibrates_the_model_on_the_databases_other_buckets(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recipe gains a bucket after its GPU runner tuned: the database measured the H100's
    n = 4096 and 1048576, not 8192. The model (here one that likes 1 warp and small
    blocks) would ship its favourite there; calibrated on the two measured buckets, where
    the fake GPU runs BLOCK = 512 on 4 warps fastest, the build ships that, and says so. A
    target the database measured nothing of keeps the model's pick."""

    class SmallFew:
        def score(self, matrix):  # type: ignore[no-untyped-def]
            i = NAMES.index
            return [-r[i("log2_block")] - r[i("log2_warps")] for r in matrix]

        score_pending = score

    db = tune_db(recipe_dir, tmp_path)
    recipe = predicting(recipe_dir, "cost-model")
    text = recipe.read_text().replace("n = [4096, 1048576]", "n = [4096, 8192, 1048576]")
    recipe.write_text(text)
    monkeypatch.setattr(predict, "model_for", lambda path: SmallFew())
    r = build(recipe, tmp_path / "c.aotc", env_for(tmp_path / "cache"), tmp_path,
              TuneOptions(enabled=False, db=db))  # fmt: skip
    with BundleFile(r.bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    chosen = {(i.target, c.bucket[0]): c for i in m.kernels[0].instances for c in i.choices}
    new = chosen[("H100", 8192)]
    assert new.how == f"predicted (cost model v{cm.VERSION}; calibrated on 2 measured buckets)"
    fast, small = _configs((512, 4), (128, 1))
    assert new.config == fast.id
    assert chosen[("H100", 4096)].how.startswith("measured on NVIDIA H100")
    plain = chosen[("sm_80", 8192)]
    assert plain.how == predict.PREDICTED
    assert plain.config == small.id
    assert "calibrated on 2 measured buckets" in r.report.read_text()
