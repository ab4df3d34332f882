"""Issue 19: the tuner in the learned cost model's order (the default) against the
heuristic's order, on recipes/example.toml's matmul and rmsnorm buckets on the H200.

    aotc build recipes/example.toml -o /tmp/old.aotc --no-tune --predict heuristic \
        --db <(zcat benchmarks/data/h200-example.tunedb.jsonl.gz)      # heuristic order
    aotc build recipes/example.toml -o /tmp/new.aotc --no-tune --predict heuristic \
        --db <(zcat benchmarks/data/h200-default-tune/example.tunedb.jsonl.gz)  # model order
    python benchmarks/default_tune_compare.py /tmp/old.aotc OLD_DB /tmp/new.aotc NEW_DB

(the databases gunzipped to files). Per kernel: buckets whose pick is the same, the median
benchmarks a bucket took in each run, and each run's picks scored by the exhaustive H200
table (benchmarks/data/h200-exhaustive.tunedb.jsonl.gz: time / the best of every config)
and by the newer run's own measurements.
"""

from __future__ import annotations

import gzip
import math
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from ci_story import choices  # noqa: E402

from aot.costmodel.data import groups, read_records  # noqa: E402


def by_problem(db: Path) -> dict[tuple, object]:
    return {(g.kernel, tuple(g.dtypes), tuple(sorted(dict(g.problem).items()))): g
            for g in groups(read_records(db), db.name)}  # fmt: skip


def benches(db: Path) -> Counter:
    return Counter((r.kernel, tuple(sorted(r.dtypes.items())), tuple(sorted(r.problem.items())))
                   for r in read_records(db) if r.kind == "bench")  # fmt: skip


def ratio(g: object, config: str) -> float:
    return g.times[config] / g.best if g is not None and config in g.times else math.nan  # type: ignore[attr-defined]


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan


def main() -> None:
    old_b, old_db, new_b, new_db = map(Path, sys.argv[1:5])
    old, new = choices(old_b), choices(new_b)
    exhaustive = Path(tempfile.mkdtemp()) / "exhaustive.jsonl"
    exhaustive.write_bytes(gzip.decompress(
        (ROOT / "benchmarks/data/h200-exhaustive.tunedb.jsonl.gz").read_bytes()))  # fmt: skip
    ex, bn, bo = by_problem(exhaustive), benches(new_db), benches(old_db)
    rows = []
    for key, g in by_problem(new_db).items():
        m = dict(key[2])["M"]
        up = [k for k in new if k[:2] == key[:2] and k[2][0] >= m]
        bucket = min(up, key=lambda k: k[2][0])
        o, n = old[bucket], new[bucket]
        rows.append((key[0], o == n, bn[key], bo[key], ratio(ex.get(key), n), ratio(ex.get(key), o),
                     ratio(g, n), ratio(g, o)))  # fmt: skip
    print("| kernel | buckets | same pick | benchmarks, model order / heuristic order (median) | "
          "exhaustive table: model-order pick / heuristic-order pick (geomean, worst) | "
          "the model-order run's own times: the same |")  # fmt: skip
    print("|---|---:|---:|---|---|---|")
    for kernel in sorted({r[0] for r in rows}):
        rs = [r for r in rows if r[0] == kernel]
        med = [statistics.median(r[i] for r in rs) for i in (2, 3)]
        exn, exo = [r[4] for r in rs], [r[5] for r in rs]
        worst = [max((x for x in xs if not math.isnan(x)), default=math.nan) for xs in (exn, exo)]
        print(f"| {kernel} | {len(rs)} | {sum(r[1] for r in rs)} | {med[0]:g} / {med[1]:g} | "
              f"{geomean(exn):.4f}× ({worst[0]:.2f}×) / {geomean(exo):.4f}× ({worst[1]:.2f}×), "
              f"{sum(not math.isnan(x) for x in exn)} timed | "
              f"{geomean([r[6] for r in rs]):.4f}× / "
              f"{geomean([r[7] for r in rs]):.4f}× |")  # fmt: skip


if __name__ == "__main__":
    main()
