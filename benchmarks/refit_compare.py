"""Scores benchmarks/run_refit_on_gpu.sh's runs (issue 19): the tuner with its online refit
of the learned cost model against the tuner before it, on the same GPU, by that GPU's dense
table of every config at every bucket.

    python benchmarks/refit_compare.py RECIPE DENSE_DB RUN_DB...

RECIPE: the runs' training recipe (benchmarks/training/grouped_gemm.toml; the runs tuned a
copy with a shorter patience, the same kernel and buckets); DENSE_DB:
benchmarks/data/h100-training/grouped_gemm.tunedb.jsonl.gz (or h200-training/'s), the GPU
the runs came from; RUN_DB: the runs' databases (grouped_gemm-refit-s2.tunedb.jsonl.gz,
...). Per run and kernel: the buckets, the benchmarks a bucket took (median, and all of
them), and the pick's time in the dense table over the table's best (geometric mean,
worst, within 3%). A run's pick and benchmarks are what a build decides from its database
(``decide.outcomes``).
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aot.costmodel.data import groups, read_records  # noqa: E402
from aot.plan import make_plan  # noqa: E402
from aot.recipe import load  # noqa: E402
from aot.tune.db import TuningDB  # noqa: E402
from aot.tune.decide import outcomes, problem  # noqa: E402


def key(r) -> tuple:  # type: ignore[no-untyped-def]
    return (r.kernel, tuple(sorted(dict(r.dtypes).items())), tuple(sorted(dict(r.problem).items())))


def picks(recipe: Path, db: Path) -> tuple[dict[tuple, str], dict[tuple, int]]:
    """Per measured bucket, the config a build ships from ``db`` and the benchmarks it took."""
    plan = make_plan(load(recipe))
    records = TuningDB(None)
    for r in read_records(db):
        records.add(r)
    found = outcomes(plan, records)
    chosen, benches = {}, {}
    for inst in plan.instances:
        for bucket, o in found.get(inst.key, {}).items():
            k = (inst.kernel.name, tuple(sorted(dict(inst.dtypes).items())),
                 tuple(sorted(problem(inst, bucket).items())))  # fmt: skip
            chosen[k], benches[k] = o.config.id, o.metrics["benchmarks"]
    return chosen, benches


def main() -> None:
    if len(sys.argv) < 4:
        sys.exit("usage: python benchmarks/refit_compare.py RECIPE DENSE_DB RUN_DB...")
    recipe, dense_db, runs = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    missing = [p for p in (recipe, Path(dense_db), *map(Path, runs)) if not p.is_file()]
    if missing:
        sys.exit(f"refit_compare: {missing[0]}: no such file")
    dense = {key(g): g for g in groups(read_records(Path(dense_db)), dense_db)}
    print(f"dense table: {dense_db} ({len(dense)} buckets, device "
          f"{next(iter(dense.values())).device if dense else '?'})\n")  # fmt: skip
    print("| run | kernel | buckets | benchmarks a bucket: median (all) | pick / dense best: "
          "geomean, worst | picks within 3% |")  # fmt: skip
    print("|---|---|---:|---|---|---:|")
    for run in map(Path, runs):
        chosen, benches = picks(recipe, run)
        kernels = sorted({k[0] for k in chosen})
        for kernel in [*kernels, "all"]:
            ks = [k for k in chosen if kernel in ("all", k[0]) and k in dense]
            ratios = [dense[k].times[chosen[k]] / dense[k].best for k in ks]
            name = run.name.split(".")[0]
            print(
                f"| {name} | {kernel} | {len(ks)} | "
                f"{statistics.median(benches[k] for k in ks):g} "
                f"({', '.join(str(benches[k]) for k in sorted(ks))}) | "
                f"{math.exp(statistics.mean(map(math.log, ratios))):.4f}×, "
                f"{max(ratios):.3f}× | {sum(x <= 1.03 for x in ratios)}/{len(ratios)} |"
            )


if __name__ == "__main__":
    main()
