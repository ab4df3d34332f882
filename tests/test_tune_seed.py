"""Every candidate config is timed on the same random inputs, even where a size is written
in the config's terms (an MoE's padded length, ``EM = tokens * top_k + E * (BLOCK_M - 1)``).
Seeded by its sizes, each block size drew its own routing, and a few tokens reached a
different number of experts per candidate: the MoE's 8-token bucket ranked a config 13%
ahead that ran 1% behind on the same data (benchmarks/RESULTS.md, issue 18)."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from aot.tune import measure
from tests.fakegpu import FakeWorker
from tests.test_tune import tune_build


def _worker(tmp_path: Path) -> tuple[Any, str]:
    """A worker's input side (no GPU) with an ``inputs`` that takes the config."""
    torch = pytest.importorskip("torch")
    from aot.tune.worker import Worker

    (tmp_path / "inputs.py").write_text(
        "import torch\ndef make(sizes, dtypes, config):\n"
        "    return [torch.randint(0, 8, (sizes['tokens'],)), sizes['EM']]\n"
    )
    w = Worker.__new__(Worker)
    w.torch, w.l2, w.inputs = torch, 64, OrderedDict()
    return w, f"{tmp_path / 'inputs.py'}:make"


def test_a_size_in_the_configs_terms_does_not_change_the_draws(tmp_path: Path) -> None:
    import torch

    w, ref = _worker(tmp_path)
    seed = repr([("tokens", 64)])
    sizes = [{"tokens": 64, "EM": 64 + 8 * (block - 1)} for block in (16, 32)]
    sets = [
        w.input_sets(ref, s, {"T": "bf16"}, {"BLOCK_M": b}, draws=4, seed=seed)
        for s, b in zip(sizes, (16, 32), strict=True)
    ]
    assert [s[0][1] for s in sets] == [184, 312]  # each laid out for its own block size
    assert all(torch.equal(x[0], y[0]) for x, y in zip(*sets, strict=True))
    # Without the seed, the sizes seed the draws: the bug this fixes.
    unseeded = [
        w.input_sets(ref, {"tokens": 64, "EM": em}, {"T": "bf16"}, {"BLOCK_M": 1}, draws=1)
        for em in (184, 312)
    ]
    assert not torch.equal(unseeded[0][0][0], unseeded[1][0][0])


def _padded(recipe_dir: Path) -> None:
    """The test recipe with a size written in the config's terms."""
    recipe = recipe_dir / "tune.toml"
    text = recipe.read_text().replace(
        'grid = "cdiv(n, BLOCK)"',
        'grid = "cdiv(padded, BLOCK)"\ncall = { padded = "keyword" }\n'
        'sizes = { padded = "n + BLOCK - 1" }',
    )
    recipe.write_text(text)


def test_every_candidate_of_a_bucket_is_seeded_by_the_bucket(
    recipe_dir: Path, tmp_path: Path
) -> None:
    _padded(recipe_dir)
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    benches = [q for q in worker.requests if q["op"] == "bench"]
    by_bucket: dict[int, list[dict[str, Any]]] = {}
    for q in benches:
        by_bucket.setdefault(q["sizes"]["n"], []).append(q)
    assert sorted(by_bucket) == [4096, 1048576]
    for n, qs in by_bucket.items():
        assert {q["seed"] for q in qs} == {repr([("n", n)])}
        assert len({q["sizes"]["padded"] for q in qs}) > 1  # the sizes differ, the seed not


def test_records_from_before_the_seed_are_measured_again(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records of such a kernel timed before the fix compared different data: a tune
    resuming from them measures them again. A kernel without such sizes keeps its own."""
    _padded(recipe_dir)
    with monkeypatch.context() as m:
        m.setattr(measure, "_seeded", lambda inst: {})  # the records before the fix
        first = tune_build(recipe_dir, tmp_path, FakeWorker())
    db = Path(str(first.bundle).replace(".aotc", ".tunedb.jsonl"))
    before = [json.loads(line) for line in db.read_text().splitlines()]
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    timed = {json.dumps(r["values"], sort_keys=True) for r in before if r["kind"] == "bench"}
    again = {json.dumps(q["config"], sort_keys=True) for q in worker.requests
             if q["op"] == "bench" and "sustain_ms" not in q}  # fmt: skip
    assert timed and timed <= again
    after = [json.loads(line) for line in db.read_text().splitlines()][len(before) :]
    assert {r["extra"].get("seed") for r in after if r["kind"] != "verify"} == {"bucket"}


def test_a_choice_does_not_compare_unseeded_timings_with_seeded_ones(
    recipe_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-tune re-measures only the configs its search visits: another config's timing
    from before (on its own draws) stays in the database, and must not win against the
    seeded ones. A database with none seeded is read whole, as before."""
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.tune.db import Record, TuningDB, read
    from aot.tune.decide import outcomes

    _padded(recipe_dir)
    with monkeypatch.context() as m:
        m.setattr(measure, "_seeded", lambda inst: {})
        db = Path(str(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
                  .replace(".aotc", ".tunedb.jsonl"))  # fmt: skip
    unseeded = list(read(db))
    tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc")
    records = list(read(db))
    plan = make_plan(load(recipe_dir / "tune.toml"))
    fresh = {r.config for r in records if r.kind == "final" and r.extra.get("seed")}
    stale = next(c.id for c in plan.instances[0].configs if c.id not in fresh)
    template = next(r for r in records if r.kind == "final" and r.config in fresh)
    fake = [Record(**{**template.__dict__, "config": stale, "round": i, "ms": 1e-3,
                      "extra": {"sustain_ms": 100}}) for i in range(3)]  # fmt: skip
    passed = next(r for r in records if r.kind == "verify" and r.problem == template.problem)
    fake.append(Record(**{**passed.__dict__, "config": stale}))

    def chosen(rs: list[Record]) -> set[str]:
        mixed = TuningDB(None)
        for r in rs:
            mixed.add(r)
        return {o.config.id for per in outcomes(plan, mixed).values() for o in per.values()}

    assert stale not in chosen([*records, *fake]) and chosen([*records, *fake]) <= fresh
    assert stale in chosen([*unseeded, *fake])


def test_a_kernel_without_such_sizes_keeps_its_records(recipe_dir: Path, tmp_path: Path) -> None:
    tune_build(recipe_dir, tmp_path, FakeWorker())
    worker = FakeWorker()
    tune_build(recipe_dir, tmp_path, worker)
    assert not [q for q in worker.requests if q["op"] == "bench"]


def test_the_counts_a_choice_reports_are_of_the_spaces_configs(
    recipe_dir: Path, tmp_path: Path
) -> None:
    """A database may hold timings of configs the recipe's space has since dropped: they
    neither win nor count among a bucket's benchmarks and failures (the bundle's bytes
    would otherwise depend on them)."""
    from aot.plan import make_plan
    from aot.recipe import load
    from aot.tune.db import Record, TuningDB, read
    from aot.tune.decide import outcomes

    db = Path(str(tune_build(recipe_dir, tmp_path, FakeWorker(), "a.aotc").bundle)
              .replace(".aotc", ".tunedb.jsonl"))  # fmt: skip
    records = list(read(db))
    plan = make_plan(load(recipe_dir / "tune.toml"))
    dropped = [Record(**{**r.__dict__, "config": "0123456789ab", "ok": ok, "ms": 1e-6})
               for r in records if r.kind == "bench" for ok in (True, False)]  # fmt: skip

    def metrics(rs: list[Record]) -> dict[Any, tuple[str, int, int]]:
        mixed = TuningDB(None)
        for r in rs:
            mixed.add(r)
        return {(k, b): (o.config.id, o.metrics["benchmarks"], o.metrics["failed"])
                for k, per in outcomes(plan, mixed).items() for b, o in per.items()}  # fmt: skip

    assert dropped and metrics([*records, *dropped]) == metrics(records)
