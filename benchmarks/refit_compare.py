"""Scores benchmarks/run_refit_on_gpu.sh's runs (issue 19): the tuner with its online refit
of the learned cost model against the tuner before it, on the same GPU, by that GPU's dense
table of every config at every bucket.

    python benchmarks/refit_compare.py DENSE_DB RUN_DB...

DENSE_DB: benchmarks/data/h100-training/bmm.tunedb.jsonl.gz (or h200-training/'s), the
GPU the runs came from; RUN_DB: the runs' databases (refit-s0.tunedb.jsonl.gz, ...). Per
run and kernel: the buckets, the benchmarks a bucket took (median, and all of them), and
the pick's time in the dense table over the table's best (geometric mean, worst, within
3%). A run's pick is the tuner's: the finalist, verified, with the least median over its
re-measurement rounds (``aot/tune/decide.py``).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aot.costmodel.data import groups, read_records  # noqa: E402


def key(r) -> tuple:  # type: ignore[no-untyped-def]
    return (r.kernel, tuple(sorted(dict(r.dtypes).items())), tuple(sorted(dict(r.problem).items())))


def picks(db: Path) -> tuple[dict[tuple, str], Counter]:
    rounds: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    verified: dict[tuple, set[str]] = defaultdict(set)
    benches: Counter = Counter()
    for r in read_records(db):
        if r.kind == "bench":
            benches[key(r)] += 1
        elif r.kind == "final" and r.ok and r.ms:
            rounds[key(r)][r.config].append(r.ms)
        elif r.kind == "verify" and r.ok:
            verified[key(r)].add(r.config)
    out = {}
    for k, by in rounds.items():
        ok = {c: statistics.median(ms) for c, ms in by.items() if c in verified[k]}
        if ok:
            out[k] = min(ok, key=ok.__getitem__)
    return out, benches


def main() -> None:
    dense = {key(g): g for g in groups(read_records(Path(sys.argv[1])), sys.argv[1])}
    print(f"dense table: {sys.argv[1]} ({len(dense)} buckets, device "
          f"{next(iter(dense.values())).device if dense else '?'})\n")  # fmt: skip
    print("| run | kernel | buckets | benchmarks a bucket: median (all) | pick / dense best: "
          "geomean, worst | picks within 3% |")  # fmt: skip
    print("|---|---|---:|---|---|---:|")
    for run in map(Path, sys.argv[2:]):
        chosen, benches = picks(run)
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
