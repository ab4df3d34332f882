"""Final rounds are timed on a GPU kept busy first (``tune.sustain_ms``): under sustained
load an H200 runs at the clock its power cap allows, and the ranking of close configs
changes with it (benchmarks/RESULTS.md, issue 18). Real compiles, a fake GPU."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aot.build import BuildResult, TuneOptions, build
from aot.tune.db import Record
from aot.tune.worker import sustain
from tests.conftest import env_for
from tests.fakegpu import H100, FakeWorker
from tests.test_tune import tune_build


def _rebuild(recipe: Path, db: Path, out: Path) -> list[dict[str, Any]]:
    """The requests a build of ``recipe`` resuming from ``db`` sends a new worker."""
    return _resume(recipe, db, out)[0]


def _resume(recipe: Path, db: Path, out: Path) -> tuple[list[dict[str, Any]], BuildResult]:
    worker = FakeWorker()
    opts = TuneOptions(db=db, gpus=[H100], worker_factory=lambda g: worker)
    return worker.requests, build(recipe, out, env_for(out.parent / "cache"), out.parent, opts)


def _with_baseline(recipe_dir: Path, extra: str = "") -> Path:
    recipe = recipe_dir / "tune.toml"
    text = recipe.read_text().replace(
        "budget = 12", f'baseline = "kernels/small.py:not_a_kernel"\n{extra}budget = 12'
    )
    recipe.write_text(text)
    return recipe


def _db(bundle: Path) -> Path:
    return Path(str(bundle).replace(".aotc", ".tunedb.jsonl"))


def test_finals_and_the_baseline_are_timed_after_100_ms_of_load(
    recipe_dir: Path, tmp_path: Path
) -> None:
    _with_baseline(recipe_dir)
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    finals = [q for q in worker.requests if q["op"] == "bench" and "sustain_ms" in q]
    search = [q for q in worker.requests if q["op"] == "bench" and "sustain_ms" not in q]
    baselines = [q for q in worker.requests if q["op"] == "baseline"]
    assert finals and search and baselines
    assert {q["sustain_ms"] for q in finals + baselines} == {100}
    assert {q["target_ms"] for q in finals} == {10.0}


def test_the_recipe_sets_how_long_and_0_times_from_an_idle_gpu(
    recipe_dir: Path, tmp_path: Path
) -> None:
    _with_baseline(recipe_dir, "sustain_ms = 0\n")
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    timed = [q for q in worker.requests if q["op"] in ("bench", "baseline")]
    assert timed and all(q.get("sustain_ms", 0) == 0 for q in timed)


def test_finals_timed_from_an_idle_gpu_are_measured_again_and_nothing_else(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A database from before sustained finals (a final's setup without the load, a
    baseline without a setup) keeps its search benchmarks and verifications; its finals and
    baselines are taken again. A database whose finals were sustained is reused whole."""
    recipe = _with_baseline(recipe_dir, "sustain_ms = 0\n")
    db = _db(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
    recipe.write_text(recipe.read_text().replace("sustain_ms = 0\n", ""))
    again = _rebuild(recipe, db, tmp_path / "b.aotc")
    assert again and {q["op"] for q in again} == {"bench", "baseline"}
    assert all(q["sustain_ms"] == 100 for q in again)
    assert _rebuild(recipe, db, tmp_path / "c.aotc") == []


def test_the_build_says_how_many_it_took_again(recipe_dir: Path, tmp_path: Path) -> None:
    """A resumed build that times a database's finals and baselines again (they were taken
    from an idle GPU) says so in its tuning line, rather than look like new work."""
    from aot.cli.lines import tuning_line

    recipe = _with_baseline(recipe_dir, "sustain_ms = 0\n")
    db = _db(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
    recipe.write_text(recipe.read_text().replace("sustain_ms = 0\n", ""))
    again, result = _resume(recipe, db, tmp_path / "b.aotc")
    stats = result.tuning
    assert stats is not None and stats.retaken == stats.benchmarks == len(again) > 0
    assert f"{len(again)} measurements taken ({len(again)} again: the database's were taken " \
        "another way)" in tuning_line(stats)  # fmt: skip
    _, same = _resume(recipe, db, tmp_path / "c.aotc")
    assert same.tuning is not None and same.tuning.retaken == same.tuning.benchmarks == 0
    assert "again" not in tuning_line(same.tuning)


def test_a_final_without_a_setup_is_measured_again_a_benchmark_is_not(
    recipe_dir: Path, tmp_path: Path
) -> None:
    db = _db(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
    rows = [json.loads(line) for line in db.read_text().splitlines()]
    for row in rows:  # as written before records named their setup (or their load)
        row.get("extra", {}).pop("setup", None)
        row.get("extra", {}).pop("sustain_ms", None)
    db.write_text("".join(json.dumps(row) + "\n" for row in rows))
    again = _rebuild(recipe_dir / "tune.toml", db, tmp_path / "b.aotc")
    assert again and all(q["op"] == "bench" and q["sustain_ms"] == 100 for q in again)


def test_a_negative_sustain_is_refused_by_key(recipe_dir: Path) -> None:
    from aot.plan import make_plan
    from aot.recipe import RecipeError, load

    recipe = _with_baseline(recipe_dir, "sustain_ms = -5\n")
    with pytest.raises(RecipeError, match=r"scale\.tune\.sustain_ms: -5 is below the minimum 0"):
        make_plan(load(recipe))


class _Clock:
    """Wall time that a synchronize advances by the launches it waited for."""

    def __init__(self, launch_ms: float) -> None:
        self.now, self.pending, self.launch_ms = 0.0, 0, launch_ms
        self.batches: list[int] = []

    def __call__(self) -> float:
        return self.now

    def launch(self, i: int) -> None:
        self.pending += 1

    def synchronize(self) -> None:
        self.batches.append(self.pending)
        self.now += self.pending * self.launch_ms / 1e3
        self.pending = 0


@pytest.mark.parametrize("launch_ms", [0.002, 0.3, 40.0])
def test_sustain_keeps_the_gpu_busy_for_the_time_in_short_waited_batches(
    launch_ms: float,
) -> None:
    clock = _Clock(launch_ms)
    made = sustain(clock.launch, clock.synchronize, 100, clock)
    assert made == sum(clock.batches) and clock.pending == 0
    assert 0.1 <= clock.now <= 0.1 + max(0.0201, launch_ms / 1e3)  # never 4 batches over
    assert max(clock.batches) * launch_ms <= max(20.0, launch_ms)  # each batch ≲ 5 ms × 4


def test_a_retune_does_not_let_another_configs_idle_gpu_finals_win(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A database tuned from an idle GPU, then re-tuned with sustained finals: only the
    current finalists are measured again, so another config's old finals (faster, at the
    boost clock) are still there. The choice reads the sustained ones alone; a database
    with none (all from before) is read whole."""
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.tune.db import TuningDB, read
    from aot.tune.decide import outcomes

    recipe = _with_baseline(recipe_dir, "sustain_ms = 0\n")
    db = _db(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
    recipe.write_text(recipe.read_text().replace("sustain_ms = 0\n", ""))
    _rebuild(recipe, db, tmp_path / "b.aotc")
    plan = make_plan(load(recipe))
    records = list(read(db))
    fresh = {r.config for r in records if r.kind == "final" and r.extra.get("sustain_ms")}
    # Another config's idle-GPU finals, ten times faster than anything sustained:
    stale = next(c.id for c in plan.instances[0].configs if c.id not in fresh)
    template = next(r for r in records if r.kind == "final" and r.config in fresh)
    fake = [Record(**{**template.__dict__, "config": stale, "round": i, "ms": 1e-3,
                      "extra": {}}) for i in range(3)]  # fmt: skip
    passed = next(r for r in records if r.kind == "verify" and r.problem == template.problem)
    fake.append(Record(**{**passed.__dict__, "config": stale}))
    mixed = TuningDB(None)
    for r in [*records, *fake]:
        mixed.add(r)
    chosen = {o.config.id for per in outcomes(plan, mixed).values() for o in per.values()}
    assert chosen and stale not in chosen and chosen <= fresh
    old = TuningDB(None)
    for r in [*(r for r in records if not r.extra.get("sustain_ms")), *fake]:
        old.add(r)
    assert any(o.config.id == stale for per in outcomes(plan, old).values()
               for o in per.values())  # fmt: skip


def _two_kernels(recipe_dir: Path) -> Path:
    """tune.toml with a second kernel, ``scale2`` (the same function), both timing their
    finals from an idle GPU (``sustain_ms = 0``)."""
    recipe = recipe_dir / "tune.toml"
    text = recipe.read_text().replace("budget = 12", "sustain_ms = 0\nbudget = 12")
    block = text[text.index("[[kernel]]") :]
    recipe.write_text(text + "\n" + block.replace('name = "scale"', 'name = "scale2"', 1))
    return recipe


def _picks(result: BuildResult) -> dict[str, list[str]]:
    from tests.test_tune import manifest_of

    m = manifest_of(result.bundle)
    return {k.name: [c.config for i in k.instances for c in i.choices] for k in m.kernels}


def test_tune_only_takes_the_named_kernels_measurements_and_keeps_the_others(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A database whose finals were timed from an idle GPU has every kernel's finals taken
    again by a resumed build (the decode recipe's: 5,140). With ``only`` (the CLI's
    --tune-only) the build measures the kernels named and nothing else; the others keep the
    database's picks, measured as they were."""
    recipe = _two_kernels(recipe_dir)
    first = tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    db = _db(first.bundle)
    recipe.write_text(recipe.read_text().replace("sustain_ms = 0\n", ""))
    worker = FakeWorker()
    opts = TuneOptions(db=db, gpus=[H100], worker_factory=lambda g: worker,
                       only=frozenset({"scale2"}))  # fmt: skip
    out = tmp_path / "b.aotc"
    again = build(recipe, out, env_for(tmp_path / "cache"), tmp_path, opts)
    benched = {q["spec"]["name"] for q in worker.requests if q["op"] == "bench"}
    assert benched == {"scale2"}
    assert again.tuning is not None and again.tuning.retaken > 0
    assert _picks(again)["scale"] == _picks(first)["scale"]
    assert again.decided == first.decided  # scale's buckets still measured, not heuristic
    # a plain resume now takes scale's finals again: the build above left them as they were
    requests, _ = _resume(recipe, db, tmp_path / "c.aotc")
    assert {q["spec"]["name"] for q in requests if q["op"] == "bench"} == {"scale"}


def test_plan_counts_what_a_resumed_build_takes_again(recipe_dir: Path, tmp_path: Path) -> None:
    """``aotc plan --db`` foresees the timings a GPU build would take again: as many as the
    resumed build then counts, and none once it has."""
    from aot.costmodel.data import read_records
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.tune.measure import stale

    recipe = _with_baseline(recipe_dir, "sustain_ms = 0\n")
    db = _db(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
    recipe.write_text(recipe.read_text().replace("sustain_ms = 0\n", ""))
    foreseen = stale(make_plan(load(recipe)), read_records(db))
    _, resumed = _resume(recipe, db, tmp_path / "b.aotc")
    assert resumed.tuning is not None and resumed.tuning.retaken > 0
    assert dict(foreseen) == {"scale": resumed.tuning.retaken}
    assert not stale(make_plan(load(recipe)), read_records(db))


def test_records_of_code_that_moved_are_named(recipe_dir: Path, tmp_path: Path) -> None:
    """A line added above a kernel changes its source hash (Triton's counts first lines): the
    database's records of it no longer resolve, and the build and ``aotc plan --db`` say so
    instead of shipping the heuristic's picks silently."""
    from aot.cli.lines import built
    from tests.test_cli import invoke

    first = tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    assert first.unread == {} and first.decided.get("measured")
    db = _db(first.bundle)
    # a copy: a process imports each kernel file once, and this one has imported the first
    edited = Path(shutil.copytree(recipe_dir, tmp_path / "edited"))
    kernels = edited / "kernels" / "small.py"
    kernels.write_text("# a comment, one line down\n" + kernels.read_text())
    opts = TuneOptions(enabled=False, db=db)
    moved = build(edited / "tune.toml", tmp_path / "b.aotc", env_for(tmp_path / "cache"),
                  tmp_path, opts)  # fmt: skip
    assert set(moved.unread) == {"scale"} and moved.unread["scale"] > 0
    assert not moved.decided.get("measured")
    assert "measured these kernels only as their code was before: scale (" in built(moved)
    r = invoke(["plan", str(edited / "tune.toml"), "--db", str(db)], tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert f"scale ({moved.unread['scale']} records)" in r.stdout
