"""The shipped cost model's CPU-only picks on the candidate training kernels, scored by the H200.

    python benchmarks/costmodel_candidates.py [--buckets] [--json out.json]

The candidates (benchmarks/data/h200-training-candidates/: the H200's measurements of
training kernels of benchmarks/training/ that the shipped model was not trained on) are
kernels the model has never seen, or (``bmm_sizes``) a seen source at sizes it has not.
For each measured bucket: the model's pick among the timed configs (the best-scored one
that does not spill, when one does not), its measured time over the bucket's best; the
same for the analytical heuristic's pick and a random one, as
``aot.costmodel.evaluate.score`` scores them (benchmarks/costmodel_heldout.py does the
same for library kernels). The candidates' recipes time every config at every bucket, so
"best" is the best of the whole space, and the pick a CPU-only build ships has a measured
time too (the "shipped" column: ``predict.chooser``'s, a shortlist scored before compiling,
then scored again compiled, which can differ from the pick with every config compiled).
Compiles every timed config's variant (through AOTC_CACHE_DIR; about 1.5 min on 2 cores);
needs lightgbm. No GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CANDIDATES = ROOT / "benchmarks" / "data" / "h200-training-candidates"
TRAINING = ROOT / "benchmarks" / "training"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--buckets", action="store_true", help="print every bucket")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)

    from costmodel_heldout import build_chooser

    from aot.costmodel import dataset
    from aot.costmodel.data import Catalog
    from aot.costmodel.evaluate import evaluated, geomean, score, table
    from aot.costmodel.predict import shipped
    from aot.env import from_environ

    env = from_environ()
    dbs = sorted(CANDIDATES.glob("*.tunedb.jsonl.gz"))
    ds = dataset.load(dbs, [TRAINING], env)
    catalog = Catalog([TRAINING])
    model = shipped()
    results, rows = [], []
    for e in evaluated(ds):
        r, g = score(model, e), e.group
        resolved = catalog.resolve(g)
        assert resolved is not None  # dataset.load resolved it through an equal catalog
        pick = build_chooser(resolved.plan, env)(resolved.inst, resolved.bucket)[0].config.id
        results.append(r)
        rows.append({"kernel": g.kernel, "db": Path(g.db).name, "dtypes": dict(g.dtypes),
                     "problem": dict(g.problem), "configs": len(e.times), "model": r.model,
                     "shipped": g.times[pick] / g.best, "heuristic": r.heuristic,
                     "random": r.random, "spilled": r.spilled})  # fmt: skip
    print(f"the shipped model on {len(dbs)} candidate databases: {len(results)} buckets")
    print()
    print(table(results).replace("kernel held out", "kernel (never trained on)"))
    print()
    print("the pick a CPU-only build ships, per kernel: geomean, worst, within 1.25×")
    for kernel in dict.fromkeys(row["kernel"] for row in rows):
        x = [row["shipped"] for row in rows if row["kernel"] == kernel]
        within = sum(v <= 1.25 for v in x)
        print(f"  {kernel:<18}{geomean(x):7.3f}×{max(x):7.2f}×{within:4}/{len(x)}")
    if args.buckets:
        print()
        print("| kernel | dtypes | problem | configs | model | shipped | heuristic | random |")
        print("|---|---|---|---:|---:|---:|---:|---:|")
        for row in rows:
            dt = ",".join(f"{k}={v}" for k, v in row["dtypes"].items())
            pr = " ".join(f"{k}={v}" for k, v in row["problem"].items())
            ratios = " | ".join(
                f"{row[k]:.2f}×" for k in ("model", "shipped", "heuristic", "random")
            )
            print(f"| {row['kernel']} | {dt} | {pr} | {row['configs']} | {ratios} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
