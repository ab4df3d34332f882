"""The shipped cost model's CPU-only picks on kernels or GPUs it never trained on, measured.

    python benchmarks/costmodel_candidates.py [--buckets] [--json out.json]
    python benchmarks/costmodel_candidates.py --data benchmarks/data/h100-training \
        --tuned-on benchmarks/data/h200-training benchmarks/data/h200-training-candidates

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
``--data`` scores another folder of the training recipes' databases instead: the H100's
(benchmarks/data/h100-training/), a GPU the model never trained on, where the set's own
kernels are seen kernels on an unseen GPU (the "seen" column) and the candidates are
unseen on both counts. ``--tuned-on`` adds what a GPU runner of another kind ships there
(the "transferred" column): each bucket's fastest config in those databases (the same
kernel source, dtypes and sizes, timed on the H200), its time here over the best here.
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
    ap.add_argument("--data", type=Path, default=CANDIDATES, help="the databases' folder")
    ap.add_argument("--tuned-on", type=Path, nargs="*", default=[], metavar="DIR",
                    help="folders of another GPU's databases: the transferred column")  # fmt: skip
    args = ap.parse_args(argv)

    from costmodel_heldout import shipped_pick

    from aot.costmodel import dataset
    from aot.costmodel.data import Catalog
    from aot.costmodel.evaluate import evaluated, score, table
    from aot.costmodel.predict import shipped
    from aot.env import from_environ

    env = from_environ()
    dbs = sorted(args.data.glob("*.tunedb.jsonl.gz"))
    if not dbs:
        ap.error(f"--data {args.data}: no *.tunedb.jsonl.gz there")
    ds = dataset.load(dbs, [TRAINING], env)
    catalog = Catalog([TRAINING])
    model = shipped()
    seen = trained_sources()
    elsewhere = fastest(args.tuned_on)
    results, rows = [], []
    for e in evaluated(ds):
        r, g = score(model, e), e.group
        resolved = catalog.resolve(g)
        assert resolved is not None  # dataset.load resolved it through an equal catalog
        pick = shipped_pick(resolved, env)
        there = elsewhere.get((g.kernel, g.source, g.dtypes, g.problem))
        results.append(r)
        rows.append({"kernel": g.kernel, "db": Path(g.db).name, "device": g.device,
                     "seen": g.source in seen, "dtypes": dict(g.dtypes),
                     "problem": dict(g.problem), "configs": len(e.times), "model": r.model,
                     "shipped": g.times[pick] / g.best if pick in g.times else None,
                     "transferred": g.times[there] / g.best if there in g.times else None,
                     "heuristic": r.heuristic, "random": r.random,
                     "spilled": r.spilled})  # fmt: skip
    devices = ", ".join(sorted({row["device"] for row in rows}))
    print(f"the shipped model on {len(dbs)} databases of {args.data.name} ({devices}): "
          f"{len(results)} buckets")  # fmt: skip
    print()
    print(table(results).replace("kernel held out", "kernel"))
    print()
    print(summary(rows))
    if args.buckets:
        print()
        print(per_bucket(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def _cells(rows: list[dict]) -> str:
    """The shipped and the transferred picks' geomean, worst and count within 1.25×."""
    from aot.costmodel.evaluate import geomean

    out = ""
    for key in ("shipped", "transferred"):
        if x := [row[key] for row in rows if row[key] is not None]:
            out += f"{geomean(x):9.3f}×{max(x):7.2f}×{sum(v <= 1.25 for v in x):4}/{len(x)}"
    return out


def summary(rows: list[dict]) -> str:
    """Per kernel and for the seen and the new ones: the pick a CPU-only build ships, and
    the other GPU's fastest where ``--tuned-on`` gave one."""
    lines = ["per kernel: seen in training (on the H200); the pick a CPU-only build ships and,",
             "with --tuned-on, the other GPU's fastest: geomean, worst, within 1.25×"]  # fmt: skip
    for kernel in dict.fromkeys(row["kernel"] for row in rows):
        mine = [row for row in rows if row["kernel"] == kernel]
        lines.append(f"  {kernel:<22}{'seen' if mine[0]['seen'] else 'new':>5}{_cells(mine)}")
    for label, seen in (("all seen", True), ("all new", False)):
        if part := [row for row in rows if row["seen"] is seen]:
            lines.append(f"  {label:<27}{_cells(part)}")
    return "\n".join(lines)


def per_bucket(rows: list[dict]) -> str:
    lines = ["| kernel | dtypes | problem | configs | model | shipped | transferred | heuristic "
             "| random |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for row in rows:
        dt = ",".join(f"{k}={v}" for k, v in row["dtypes"].items())
        pr = " ".join(f"{k}={v}" for k, v in row["problem"].items())
        ratios = " | ".join(
            "–" if row[k] is None else f"{row[k]:.2f}×"
            for k in ("model", "shipped", "transferred", "heuristic", "random")
        )
        lines.append(f"| {row['kernel']} | {dt} | {pr} | {row['configs']} | {ratios} |")
    return "\n".join(lines)


def trained_sources() -> set[str]:
    """The kernel sources the shipped model was trained on (its provenance's databases)."""
    from aot.costmodel.data import read_records
    from aot.costmodel.predict import SHIPPED

    meta = json.loads(SHIPPED.with_suffix(".json").read_text())
    return {r.source for db in meta["databases"] for r in read_records(ROOT / db["file"])}


def fastest(folders: list[Path]) -> dict[tuple, str]:
    """Per (kernel, source, dtypes, problem): the fastest config timed in ``folders``."""
    from aot.costmodel.data import groups, read_records

    out = {}
    for folder in folders:
        for db in sorted(folder.glob("*.tunedb.jsonl.gz")):
            for g in groups(read_records(db), str(db)):
                out[(g.kernel, g.source, g.dtypes, g.problem)] = min(g.times, key=g.times.get)
    return out


if __name__ == "__main__":
    sys.exit(main())
