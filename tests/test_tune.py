"""Tuning on the CPU: strategies on recorded/synthetic timing tables, the database
(resume, merge, torn lines), and the tuner end to end against a fake GPU."""

from __future__ import annotations

import itertools
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from aot.build import TuneOptions, build
from aot.plan import Config
from aot.tune import strategies
from aot.tune.db import Record, TuningDB, merge, read
from loader.format import BundleFile
from loader.manifest import Manifest
from tests.conftest import env_for
from tests.fakegpu import H100, FakeWorker

# -- strategies on a synthetic table --------------------------------------------------

SPACE = [
    Config((("BLOCK_K", k), ("BLOCK_M", m), ("BLOCK_N", n)), w, s)
    for m, n, k, w, s in itertools.product(
        [16, 32, 64, 128], [32, 64, 128, 256], [32, 64, 128], [4, 8], [3, 4]
    )
]  # 192 configs, like the example matmul


def table(c: Config) -> float:
    """A rugged landscape with its best at 128×128×64, 8 warps, 3 stages, plus noise that
    is fixed per config (as a recorded table's would be)."""
    v = c.values()
    rng = random.Random(c.id)
    return (
        1.0
        + 0.25 * abs(math.log2(v["BLOCK_M"] / 128))
        + 0.2 * abs(math.log2(v["BLOCK_N"] / 128))
        + 0.15 * abs(math.log2(v["BLOCK_K"] / 64))
        + 0.1 * (v["num_warps"] != 8)
        + 0.05 * (v["num_stages"] != 3)
        + rng.uniform(0, 0.03)
    )


def run(search: strategies.Search, objective=table) -> list[Config]:  # type: ignore[no-untyped-def]
    proposed = []
    while (c := search.ask()) is not None:
        proposed.append(c)
        search.tell(c, objective(c))
    return proposed


BEST = min(table(c) for c in SPACE)


@pytest.mark.parametrize("name", ["grid", "random", "bayes", "model"])
def test_each_strategy_finds_the_tables_best_within_budget(name: str) -> None:
    budget = len(SPACE) if name in ("grid", "random") else 60
    s = strategies.make(name, SPACE, budget=budget, patience=budget, seed=1)
    proposed = run(s)
    assert len(proposed) == len(set(proposed)) <= budget  # never the same config twice
    assert s.best is not None
    assert s.best[0] <= BEST * 1.03, (name, s.best[0], BEST)


def test_model_strategy_uses_the_ranking_and_is_sample_efficient() -> None:
    # A ranking that puts the true best at position 30: model should still find it quickly
    ranked = sorted(SPACE, key=lambda c: abs(table(c) - BEST * 1.2))
    s = strategies.make("model", ranked, budget=50, patience=20, seed=0)
    run(s)
    assert s.best is not None and s.best[0] <= BEST * 1.03
    assert ranked[: strategies.Model.SEED_TOP] == list(s.seen)[: strategies.Model.SEED_TOP]


def test_the_learned_models_scores_refitted_to_the_measurements_predict_the_rest() -> None:
    """Scores that order the configs as their times do, on another scale: the refit
    calibrates them (time falls as the score rises) and predicts configs never measured;
    scores that run against the measurements are dropped, not inverted."""
    prior = {c: -math.log(table(c)) * 7 + 3 for c in SPACE}
    seen = {c: table(c) for c in SPACE[::10]}
    predicted = strategies.refit(seen, prior)
    rest = [c for c in SPACE if c not in seen]
    assert all(abs(predicted(c) - math.log(table(c))) < 1e-9 for c in rest)
    inverted = {c: -s for c, s in prior.items()}
    predicted = strategies.refit(seen, inverted)
    additive = strategies.additive_fit(seen)
    mean = statistics.mean(math.log(ms) for ms in seen.values())
    for c in rest[:20]:
        alone = mean + sum(additive.get(pv, 0.0) for pv in c.values().items())
        assert predicted(c) == pytest.approx(alone)


def test_model_strategy_refits_the_learned_model_after_its_top_picks() -> None:
    """After the learned order's top picks, the next move is the best's neighbour that the
    refitted model predicts fastest. Scores that follow the table, but for one neighbour
    the additive surrogate rates last and the model rates first: the refit moves there,
    the additive surrogate alone (no scores) does not."""
    ranked = sorted(SPACE, key=lambda c: abs(table(c) - BEST * 1.3))  # the best ranked far
    top = strategies.Model.SEED_TOP

    def after_seeds(s: strategies.Search) -> Config | None:
        for _ in range(top):
            c = s.ask()
            assert c is not None
            s.tell(c, table(c))
        s.rng.random = lambda: 1.0  # type: ignore[method-assign]  # no exploration now
        return s.ask()

    plain = strategies.make("model", ranked, budget=60, patience=60, seed=0)
    moved = after_seeds(plain)
    assert plain.best is not None
    effect = strategies.additive_fit({c: ms for c, ms in plain.seen.items() if ms is not None})
    moves = [c for c in ranked[top:] if strategies.neighbours(c, plain.best[1])]
    last = max(moves, key=lambda c: sum(effect.get(pv, 0.0) for pv in c.values().items()))
    assert moved != last
    prior = {c: -math.log(table(c)) for c in ranked} | {last: 10.0}
    refitted = strategies.make("model", ranked, budget=60, patience=60, seed=0, prior=prior)
    assert after_seeds(refitted) == last


@pytest.mark.parametrize("name", ["random", "bayes", "model"])
def test_reproducible_from_seed(name: str) -> None:
    a = run(strategies.make(name, SPACE, budget=30, patience=30, seed=7))
    b = run(strategies.make(name, SPACE, budget=30, patience=30, seed=7))
    assert a == b


def test_patience_stops_a_search_without_gain() -> None:
    flat = run(strategies.make("random", SPACE, budget=100, patience=5, seed=0), lambda c: 1.0)
    assert len(flat) == 6  # the first sets the best; five more without a >1% gain


def test_warm_start_configs_come_first_and_budget_counts_benchmarks_only() -> None:
    warm = [SPACE[50], SPACE[10]]
    s = strategies.make("model", SPACE, budget=5, patience=5, seed=0, warm=warm)
    assert s.ask() == SPACE[50]
    s.tell(SPACE[50], 1.0)
    assert s.ask() == SPACE[10]
    s.tell(SPACE[10], None, benchmarked=False)  # failed to compile: no budget spent
    assert s.benchmarks == 1 and SPACE[10] in s.seen


def test_failures_steer_model_and_bayes_away() -> None:
    # every config with BLOCK_M=128 fails; strategies must still find the best elsewhere
    def objective(c: Config) -> float | None:
        return None if c.values()["BLOCK_M"] == 128 else table(c)

    best_ok = min(table(c) for c in SPACE if c.values()["BLOCK_M"] != 128)
    for name in ("model", "bayes"):
        s = strategies.make(name, SPACE, budget=60, patience=60, seed=3)
        failures = 0
        while (c := s.ask()) is not None:
            ms = objective(c)
            failures += ms is None
            s.tell(c, ms)
        assert s.best is not None and s.best[0] <= best_ok * 1.03, name
        assert failures < 30, (name, failures)


# -- the database ---------------------------------------------------------------------


def rec(config: str, ms: float | None = 1.0, kind: str = "bench", **kw: object) -> Record:
    base = dict(kernel="k", source="s", triton="3.6.0", device="NVIDIA H100", arch="sm_90",
                dtypes={"T": "fp16"}, problem={"M": 16}, config=config, kind=kind,
                ok=ms is not None, ms=ms)  # fmt: skip
    return Record(**{**base, **kw})  # type: ignore[arg-type]


def test_db_appends_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    db = TuningDB(path)
    db.add(rec("a", 1.0))
    db.add(rec("b", None, reason="hang"))
    again = TuningDB(path)
    assert len(again) == 2 and again.get(rec("b")).reason == "hang"  # type: ignore[union-attr]


def test_db_drops_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    db = TuningDB(path)
    db.add(rec("a"))
    with open(path, "ab") as f:
        f.write(b'{"kernel": "k", "sour')  # killed mid-write
    assert [r.config for r in read(path)] == ["a"]
    assert path.read_bytes().endswith(b"\n")
    TuningDB(path).add(rec("b"))
    assert [r.config for r in read(path)] == ["a", "b"]


def test_merge_is_order_independent_and_deduplicates(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    da, db_ = TuningDB(a), TuningDB(b)
    da.add(rec("x", 1.0))
    da.add(rec("y", 2.0))
    db_.add(rec("y", 2.0))
    db_.add(rec("z", 3.0, device="NVIDIA A100", arch="sm_80"))
    assert merge([a, b], tmp_path / "ab.jsonl") == 3
    assert merge([b, a], tmp_path / "ba.jsonl") == 3
    assert (tmp_path / "ab.jsonl").read_bytes() == (tmp_path / "ba.jsonl").read_bytes()


def test_bad_database_line_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"nope": 1}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:1: not a tuning record"):
        list(read(path))


# -- the tuner end to end, with real compiles and a fake GPU --------------------------


def tune_build(recipe_dir: Path, tmp_path: Path, worker: FakeWorker, out: str = "t.aotc"):  # type: ignore[no-untyped-def]
    opts = TuneOptions(gpus=[H100], worker_factory=lambda g: worker)
    return build(recipe_dir / "tune.toml", tmp_path / out, env_for(tmp_path / "cache"),
                 tmp_path, opts)  # fmt: skip


def manifest_of(path: Path) -> Manifest:
    with BundleFile(path) as bf:
        return Manifest.from_json(bf.manifest)


def test_tuning_picks_the_tables_best_and_records_how(recipe_dir: Path, tmp_path: Path) -> None:
    worker = FakeWorker()
    r = tune_build(recipe_dir, tmp_path, worker)
    assert r.tuning is not None and r.tuning.instances == 1  # only the H100 target is present
    assert r.decided == {"measured": 2, "transferred": 2, "heuristic": 2}
    m = manifest_of(r.bundle)
    by_target = {i.target: i for i in m.kernels[0].instances}
    for choice in by_target["H100"].choices:
        v = by_target["H100"].variants[choice.variants[0]]
        assert (v.meta["BLOCK"], v.num_warps) == (512, 4)
        assert choice.how == "measured on NVIDIA H100 80GB HBM3"
        assert choice.metrics["error"] <= choice.metrics["tolerance"] == 1e-3
        assert choice.metrics["gbps"] > 0 and choice.metrics["benchmarks"] <= 12
    assert all(c.how == "transferred from H100" for c in by_target["H200"].choices)
    assert all(c.how == "untuned (heuristic)" for c in by_target["sm_80"].choices)
    report = r.report.read_text()
    assert "measured on NVIDIA H100" in report and "GB/s" in report
    heatmaps = list(r.report.with_suffix("").with_suffix(".report").glob("*.svg"))
    assert heatmaps and "<svg" in heatmaps[0].read_text()


def test_rebuild_resumes_and_measures_nothing_again(recipe_dir: Path, tmp_path: Path) -> None:
    first = FakeWorker()
    a = tune_build(recipe_dir, tmp_path, first, "a.aotc")
    db = Path(str(a.bundle).replace(".aotc", ".tunedb.jsonl"))
    second = FakeWorker()
    opts = TuneOptions(db=db, gpus=[H100], worker_factory=lambda g: second)
    b = build(recipe_dir / "tune.toml", tmp_path / "b.aotc", env_for(tmp_path / "cache"),
              tmp_path, opts)  # fmt: skip
    assert second.requests == []
    assert b.tuning is not None and b.tuning.benchmarks == 0 and b.tuning.resumed > 0
    assert a.bundle.read_bytes() == b.bundle.read_bytes()


def test_a_measurement_of_a_variant_no_longer_compiled_is_taken_again(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A record's key names the config, not the variant that ran it: after a change of
    specializations, the database holds the old variants' times under config ids still
    planned. Those are measured again (once), never reused as today's variants' times."""
    a = tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    db = Path(str(a.bundle).replace(".aotc", ".tunedb.jsonl"))
    recipe = recipe_dir / "tune.toml"
    specs = 'specializations = [{ "*" = 16, n = 0, x_ptr = 0 }]  # x_ptr no longer aligned\n'
    recipe.write_text(recipe.read_text().replace("[kernel.space]", specs + "[kernel.space]"))

    def rebuild(worker: FakeWorker, out: str):  # type: ignore[no-untyped-def]
        opts = TuneOptions(db=db, gpus=[H100], worker_factory=lambda g: worker)
        return build(recipe, tmp_path / out, env_for(tmp_path / "cache"), tmp_path, opts)

    before = {r.key: r.extra["variant"] for r in read(db) if r.kind == "bench"}
    again = FakeWorker()
    b = rebuild(again, "b.aotc")
    benches = [r for r in again.requests if r["op"] == "bench"]
    assert benches, "the old variants' times were reused"
    assert b.tuning is not None and b.tuning.benchmarks == len(benches)
    after = {r.key: r.extra["variant"] for r in read(db) if r.kind == "bench"}
    assert any(after[k] != v for k, v in before.items() if k in after)  # replaced, same key
    third = FakeWorker()
    c = rebuild(third, "c.aotc")
    assert [r for r in third.requests if r["op"] == "bench"] == []  # the new records serve
    assert b.bundle.read_bytes() == c.bundle.read_bytes()


def test_interrupted_build_resumes_without_repeating_work(recipe_dir: Path, tmp_path: Path) -> None:
    full = FakeWorker()
    tune_build(recipe_dir, tmp_path / "full", full)
    total = len(full.requests)
    killed = FakeWorker(interrupt_after=total // 2)
    with pytest.raises(KeyboardInterrupt):
        tune_build(recipe_dir, tmp_path / "resume", killed)
    assert not (tmp_path / "resume" / "t.aotc").exists()  # no bundle from a killed build
    rest = FakeWorker()
    r = tune_build(recipe_dir, tmp_path / "resume", rest)
    assert len(killed.requests) + len(rest.requests) == total
    assert r.bundle.read_bytes() == (tmp_path / "full" / "t.aotc").read_bytes()


def test_faulting_hanging_and_wrong_candidates_are_rejected(
    recipe_dir: Path, tmp_path: Path
) -> None:
    recipe = recipe_dir / "tune.toml"  # exhaustive, so every planted failure is visited
    text = recipe.read_text().replace('strategy = "model"', 'strategy = "grid"')
    recipe.write_text(
        text.replace("budget = 12", "budget = 16").replace("patience = 6", "patience = 16")
    )
    worker = FakeWorker(fault={(512, 4)}, hang={(512, 2)}, wrong={(512, 8), (256, 4)})
    r = tune_build(recipe_dir, tmp_path, worker)
    m = manifest_of(r.bundle)
    h100 = next(i for i in m.kernels[0].instances if i.target == "H100")
    for choice in h100.choices:
        v = h100.variants[choice.variants[0]]
        assert (v.meta["BLOCK"], v.num_warps) not in {(512, 4), (512, 2), (512, 8), (256, 4)}
        assert choice.how.startswith("measured")
    reasons = [rr.reason for rr in TuningDB(r.db) if not rr.ok]
    assert any("illegal memory access" in x for x in reasons)
    assert any("hang" in x for x in reasons)
    assert any("wrong result" in x for x in reasons)
    assert "Candidates rejected while tuning" in r.report.read_text()


def test_no_reference_means_tuned_but_unverified(recipe_dir: Path, tmp_path: Path) -> None:
    recipe = recipe_dir / "tune.toml"
    recipe.write_text(
        recipe.read_text().replace('reference = "kernels/small.py:not_a_kernel"\n', "")
    )
    worker = FakeWorker(wrong={(512, 4)})  # nothing checks results without a reference
    r = tune_build(recipe_dir, tmp_path, worker)
    assert not any(m["op"] == "verify" for m in worker.requests)
    h100 = next(i for i in manifest_of(r.bundle).kernels[0].instances if i.target == "H100")
    for choice in h100.choices:
        assert choice.how == "measured on NVIDIA H100 80GB HBM3 (unverified: no reference)"
        assert "error" not in choice.metrics
    assert "unverified" in r.report.read_text()


def test_every_measurement_is_in_the_database_with_its_key(
    recipe_dir: Path, tmp_path: Path
) -> None:
    worker = FakeWorker()
    r = tune_build(recipe_dir, tmp_path, worker)
    lines = [json.loads(x) for x in r.db.read_text().splitlines()]
    assert len(lines) == len(worker.requests)
    assert {x["kind"] for x in lines} == {"bench", "verify", "final"}
    for x in lines:
        assert x["device"] == H100.name and x["triton"] == "3.6.0" and x["source"]
        assert set(x["problem"]) == {"n"}


def test_worker_loads_recipe_functions_by_absolute_path() -> None:
    from aot.kernelfile import load_function  # what the tuning worker loads with

    path = (Path(__file__).parent / "data" / "kernels" / "small.py").resolve()
    assert load_function(f"{path}:not_a_kernel") == 42
    assert load_function(f"{path}:scale_kernel") is load_function(f"{path}:scale_kernel")


def test_the_summary_counts_the_candidates_compiled_for_tuning(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A tuning build compiles its candidates in the tuner's pool: the summary says how
    many (it used to say "0 compiled" after minutes of compiling)."""
    from aot.cli.lines import tuning_line

    first = tune_build(recipe_dir, tmp_path / "a", FakeWorker())
    assert first.tuning is not None and first.tuning.compiled > 0
    assert f"{first.tuning.compiled} candidate variants compiled" in tuning_line(first.tuning)
    again = tune_build(recipe_dir, tmp_path / "a", FakeWorker(), out="u.aotc")  # same cache
    assert again.tuning is not None and again.tuning.compiled == 0


def test_the_second_verification_is_at_a_size_the_config_serves() -> None:
    """Off its bound, a bucket is verified at a size the config's constraints allow: the
    Hopper attention needs N_CTX % BLOCK_M == 0, and a check at N_CTX = 769 (which the
    loader refuses for every variant) once failed every candidate, so no bucket tuned."""
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.tune.decide import off_bucket

    plan = make_plan(load(Path(__file__).resolve().parents[1] / "recipes" / "hopper.toml"))
    attn = next(i for i in plan.instances if i.kernel.name == "attention_d64")
    by_block = {c.values()["BLOCK_M"]: c for c in attn.configs}
    assert off_bucket(attn, (1024,))["N_CTX"] == 769  # without a config: the middle
    assert off_bucket(attn, (1024,), by_block[128])["N_CTX"] == 896
    assert off_bucket(attn, (1024,), by_block[64])["N_CTX"] == 832
    assert off_bucket(attn, (512,), by_block[128])["N_CTX"] == 384
    # a kernel whose constraints do not read the bucket's key keeps the middle
    mm = next(i for i in plan.instances if i.kernel.name == "matmul_tma")
    assert off_bucket(mm, (512,), mm.configs[0])["M"] == 385


def _trap(values: dict[str, int], n: int) -> float:
    """The best config everywhere is BLOCK=1024 with one warp; around BLOCK=128, where the
    heuristic starts the small bucket, the table is flat, and the way up looks worse."""
    b, w = values["BLOCK"], values["num_warps"]
    f = 1.0 if (b, w) == (1024, 1) else {128: 1.5, 256: 1.6, 512: 1.7, 1024: 1.8}[b]
    return (n / 1e6) * f


def test_a_bucket_tries_its_upper_neighbours_best(recipe_dir: Path, tmp_path: Path) -> None:
    """A bucket is warm-started from the one below it; the second look, top down, gives it
    the best of the one above, which it would otherwise never have tried here."""
    recipe = recipe_dir / "tune.toml"
    text = recipe.read_text()
    recipe.write_text(text.replace("budget = 12\npatience = 6", "budget = 16\npatience = 3"))
    worker = FakeWorker(table=_trap)
    r = tune_build(recipe_dir, tmp_path, worker)
    m = manifest_of(r.bundle)
    (h100,) = [i for i in m.kernels[0].instances if i.target == "H100"]
    for choice in h100.choices:
        v = h100.variants[choice.variants[0]]
        assert (v.meta["BLOCK"], v.num_warps) == (1024, 1), choice.bucket
        assert choice.metrics["benchmarks"] <= 16  # the second look stays within the budget
    small = [q for q in worker.requests if q["op"] == "bench" and q["sizes"]["n"] == 4096]
    blocks = [q["spec"]["instances"][0]["variants"][0]["meta"]["BLOCK"] for q in small]
    assert blocks[: blocks.index(1024)].count(128) >= 3  # the first look stayed near 128


def test_the_baseline_runs_at_the_buckets_sizes_expressions_included(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A size written as an expression of the bucket (attention's Z = 16384 // N_CTX) is
    evaluated for the baseline as for the kernel: it was once sent without it, and every
    baseline failed (KeyError) while the kernel's own timings went through."""
    recipe = recipe_dir / "tune.toml"
    half = 'call = { half = "keyword" }\nsizes = { half = "n // 2" }'
    baseline = 'baseline = "kernels/small.py:not_a_kernel"'
    text = recipe.read_text().replace("n = [4096, 1048576] }", "n = [4096, 1048576] }\n" + half)
    recipe.write_text(text.replace('bytes = "8 * n"', 'bytes = "8 * n"\n' + baseline))
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    baselines = [q for q in worker.requests if q["op"] == "baseline"]
    assert baselines
    assert all(q["sizes"]["half"] == q["sizes"]["n"] // 2 for q in baselines), baselines[0]["sizes"]


def test_the_recipes_first_configs_are_measured_first_in_every_bucket(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """`tune.first` (an author's own table): measured in every bucket before the search,
    so a best config the search's order would reach late, or never, is found."""
    recipe = recipe_dir / "tune.toml"
    text = recipe.read_text()
    first = "first = [{ num_warps = 1, BLOCK = 1024, num_ctas = 1 }]"  # num_ctas: the default
    recipe.write_text(
        text.replace("budget = 12\npatience = 6", f"budget = 12\npatience = 2\n{first}")
    )
    worker = FakeWorker(table=_trap)
    r = tune_build(recipe_dir, tmp_path, worker)
    benches = [q for q in worker.requests if q["op"] == "bench"]
    for n in (4096, 1048576):
        first = next(q for q in benches if q["sizes"]["n"] == n)
        v = first["spec"]["instances"][0]["variants"][0]
        assert (v["meta"]["BLOCK"], v["num_warps"]) == (1024, 1), n
    (h100,) = [i for i in manifest_of(r.bundle).kernels[0].instances if i.target == "H100"]
    for choice in h100.choices:
        v = h100.variants[choice.variants[0]]
        assert (v.meta["BLOCK"], v.num_warps) == (1024, 1), choice.bucket


@pytest.mark.parametrize(
    ("first", "error"),
    [
        (
            "[{ BLOCK = 1024, num_warps = 3 }]",
            "first[0]: no candidate config sets these values (is each in the space?)",
        ),
        (
            "[{ BLOCK = 256 }, { BLOK = 1024 }]",
            "first[1]: BLOK is not a value a config sets (those are BLOCK, num_stages, num_warps)",
        ),
        ("{ BLOCK = 1024 }", "tune.first: must be a non-empty list of configs"),
        ("[1024]", "tune.first[0]: must be a table of the values a config sets"),
        ("[{ BLOCK = [1024] }]", "tune.first[0].BLOCK: [1024]: a config's value is a number"),
        ('"missing.json"', "tune.first: cannot read"),
        ('"tune.toml"', "tune.toml is not JSON"),
        ('"kernels/small.py:TABLE"', "tune.first: kernels/small.py defines no 'TABLE'"),
        ('"kernels/small.py:scale_kernel"', "kernels/small.py:scale_kernel must hold a list"),
    ],
)
def test_a_first_config_the_space_lacks_is_refused_by_name(
    recipe_dir: Path, first: str, error: str
) -> None:
    from aot.plan import make_plan
    from aot.recipe import RecipeError, load

    recipe = recipe_dir / "tune.toml"
    recipe.write_text(recipe.read_text().replace("budget = 12", f"first = {first}\nbudget = 12"))
    with pytest.raises(RecipeError) as err:
        make_plan(load(recipe))
    assert error in str(err.value)


def _benches_of_rebuild(recipe: Path, db: Path, out: Path) -> list[dict[str, Any]]:
    """The bench requests a build of ``recipe`` into ``out``, resuming from ``db``, sends
    a new worker (none: every measurement was reused)."""
    worker = FakeWorker()
    opts = TuneOptions(db=db, gpus=[H100], worker_factory=lambda g: worker)
    build(recipe, out, env_for(out.parent / "cache"), out.parent, opts)
    return [r for r in worker.requests if r["op"] == "bench"]


def test_a_new_more_specialized_variant_is_measured_not_the_old_records_reused(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A recipe that adds a variant a call would now run first (here: n divisible by 16,
    which the buckets' bounds are) keeps the old variants planned; their records must not
    stand for the config, whose calls now run the new one."""
    a = tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    db = Path(str(a.bundle).replace(".aotc", ".tunedb.jsonl"))
    assert all("setup" in r.extra for r in read(db) if r.kind == "bench")
    recipe = recipe_dir / "tune.toml"
    specs = 'specializations = [{ "*" = 16 }, { "*" = 16, n = 0 }]\n'
    recipe.write_text(recipe.read_text().replace("[kernel.space]", specs + "[kernel.space]"))
    benches = _benches_of_rebuild(recipe, db, tmp_path / "b.aotc")
    assert benches, "the old variants' times were reused"
    for r in benches:  # each offers the new variant, which a call at a bound runs
        assert any(v["assume"].get("n") == 16 for v in r["spec"]["instances"][0]["variants"])


def test_the_plan_says_which_configs_come_first_and_over_how_many_draws() -> None:
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.summary import describe_plan

    root = Path(__file__).resolve().parents[1]
    text = describe_plan(make_plan(load(root / "recipes" / "gallery" / "moe.toml")))
    assert "measured first in every bucket: 6 configs (tune.first)" in text
    assert "each config timed over 4 draws of inputs (tune.draws)" in text


def test_times_over_another_number_of_draws_are_taken_again(
    recipe_dir: Path, tmp_path: Path
) -> None:
    a = tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    db = Path(str(a.bundle).replace(".aotc", ".tunedb.jsonl"))
    recipe = recipe_dir / "tune.toml"
    recipe.write_text(recipe.read_text().replace("budget = 12", "draws = 3\nbudget = 12"))
    benches = _benches_of_rebuild(recipe, db, tmp_path / "b.aotc")
    assert benches and all(r["draws"] == 3 for r in benches)


def test_first_reads_an_authors_tuned_json_file(recipe_dir: Path, tmp_path: Path) -> None:
    """A serving engine's per-GPU file: token count -> config. Its configs come first."""
    (recipe_dir / "h100.json").write_text(
        json.dumps({"1": {"BLOCK": 1024, "num_warps": 1}, "4096": {"BLOCK": 1024, "num_warps": 1}})
    )
    recipe = recipe_dir / "tune.toml"
    recipe.write_text(recipe.read_text().replace("budget = 12", 'first = "h100.json"\nbudget = 12'))
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    first = next(q for q in worker.requests if q["op"] == "bench")
    v = first["spec"]["instances"][0]["variants"][0]
    assert (v["meta"]["BLOCK"], v["num_warps"]) == (1024, 1)


def test_a_record_that_does_not_say_its_draws_is_taken_again_where_draws_matter(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """Records written before they named their setup (the variants and the draws) are
    reused while the kernel is timed over one draw, and measured again over several: they
    do not say how many draws they were timed over."""
    a = tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    db = Path(str(a.bundle).replace(".aotc", ".tunedb.jsonl"))
    rows = [json.loads(line) for line in db.read_text().splitlines()]
    for row in rows:
        row.get("extra", {}).pop("setup", None)
    db.write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe = recipe_dir / "tune.toml"
    assert all("sustain_ms" in r for r in _benches_of_rebuild(recipe, db, tmp_path / "b.aotc"))
    db.write_text("".join(json.dumps(row) + "\n" for row in rows))
    recipe.write_text(recipe.read_text().replace("budget = 12", "draws = 4\nbudget = 12"))
    benches = _benches_of_rebuild(recipe, db, tmp_path / "c.aotc")
    assert any("sustain_ms" not in r for r in benches)  # the search's, not only the finals
    assert benches and all(r["draws"] == 4 for r in benches)
