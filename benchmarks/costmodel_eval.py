"""The learned cost model on the CPU, from the committed H200 measurements (issue 19).

    python benchmarks/costmodel_eval.py [--json out.json] [--seeds 20] [--add DB ...]

1. Leave-one-kernel-out: for each kernel (a source hash) held out, a model trained on all
   the other kernels' buckets picks each held-out bucket's config (the best-scored one that
   does not spill, when one does not); the pick's measured time over the bucket's best
   measured time, beside the analytical heuristic's pick and a random pick (the mean over
   the bucket's timed configs). Only timed configs can be scored, so where a database
   timed a sample (the MoE: 24 of 144 configs; the example's and the MLP's tunes) the
   "best" is the best of that sample. Beside it, the same buckets picked by one model
   trained on every kernel, each bucket's own included (``evaluate.in_sample``): a held-out
   miss this gets right wants no feature; what the other kernels taught ranks it otherwise.
2. Tuning sample efficiency on the exhaustive matmul and RMSNorm tables, replayed with
   benchmarks/sample_efficiency.py's machinery (noise drawn from the spread between
   re-measurement rounds, 20 seeds): the ``model`` strategy started from the heuristic's
   order (what the tuner does today) and from the learned model's (trained without the
   kernel: what it does for a kernel with ``predict = "cost-model"``), side by side.

The training kernels' databases (benchmarks/data/h200-training/*.tunedb.jsonl.gz, measured
densely by benchmarks/run_training_on_gpu.sh) join both the training and the held-out
sets when they are there; leave-one-kernel-out holds each of them out in turn like any
other kernel. ``--add`` joins more databases to both, such as a candidate training kernel's
(benchmarks/data/h200-training-candidates/: measured, and left out of the training set
after this evaluation; its README says why). Compiles every timed config's variant that
calls at its bucket run (the most specialized one; the generic one where that fails) once:
about 1200 variants without them, through the compile cache (AOTC_CACHE_DIR); needs
lightgbm. No GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

DATA = ROOT / "benchmarks" / "data"
TRAINING = ROOT / "benchmarks" / "training"  # the dense training kernels' recipes


# recipes/hopper.toml's databases, oldest first (issue 21's stops): their kernels' records
# from before a source change resolve to no recipe and are dropped as stale
HOPPER = ("hopper.tunedb.jsonl.gz", "splitk/splitk.tunedb.jsonl.gz",
          "stages/stages.tunedb.jsonl.gz", "epilogue-split/epilogue.tunedb.jsonl.gz",
          "attention-cap/attention-cap.tunedb.jsonl.gz",
          "attention-gluon/attention-gluon.tunedb.jsonl.gz",
          "attention-gluon-persistent/attention-gluon-persistent.tunedb.jsonl.gz",
          "attention-pairs/attention-pairs.tunedb.jsonl.gz",
          "matmul-ws/matmul-ws.tunedb.jsonl.gz",
          "attention-3wg/attention-3wg.tunedb.jsonl.gz")  # fmt: skip


def databases(data: Path) -> list[Path]:
    """The committed H200 databases; those of the training kernels (benchmarks/training/,
    from benchmarks/run_training_on_gpu.sh) when ``data/h200-training/`` holds them. The
    decode step's (recipes/decode.toml) also holds its paged kernels' measurements from
    before their recipe specialised the cache's token strides: ``Catalog.current`` drops
    those, and its earlier sources' buckets resolve to no recipe (counted as unmatched), as
    do its split-KV kernels' from before the split kernel's ``LOOKAHEAD`` (the reduce's
    source hash moved with it: Triton's counts first lines), which ``lookahead/`` measured
    again. The Hopper recipe's (TMA descriptors, persistent grids) joined on 2026-12-03."""
    return [data / "h200-exhaustive.tunedb.jsonl.gz", data / "h200-example.tunedb.jsonl.gz",
            data / "h200-mlp.tunedb.jsonl.gz",
            *sorted((data / "h200-gallery").glob("*.tunedb.jsonl.gz")),
            data / "h200-decode-step" / "decode.tunedb.jsonl.gz",
            data / "h200-decode-step" / "lookahead" / "lookahead.tunedb.jsonl.gz",
            *(data / "h200-hopper" / f for f in HOPPER),
            *sorted((data / "h200-training").glob("*.tunedb.jsonl.gz"))]  # fmt: skip


def recipes(dbs: list[Path]) -> list[Path]:
    """The recipes that resolve ``dbs``: the training folder only when a training database
    (or a candidate's) is among them (planning it imports its kernels)."""
    training = any(db.parent.name.startswith("h200-training") for db in dbs)
    return [ROOT / "benchmarks" / "recipes" / "exhaustive.toml", ROOT / "recipes" / "example.toml",
            ROOT / "recipes" / "mlp.toml", ROOT / "recipes" / "gallery",
            ROOT / "tests" / "data" / "shipped" / "shipped.toml", ROOT / "recipes" / "decode.toml",
            ROOT / "recipes" / "hopper.toml", *([TRAINING] if training else [])]  # fmt: skip


DBS = databases(DATA)
RECIPES = recipes(DBS)
EXHAUSTIVE = "h200-exhaustive.tunedb.jsonl.gz"


def under_data(db: str) -> str:
    """A database's path under benchmarks/data (as given, if elsewhere: ``--add``): two of
    them may share a file name (the gallery's and the Hopper recipe's splitk.tunedb.jsonl.gz)."""
    path = Path(db)
    return str(path.relative_to(DATA)) if path.is_relative_to(DATA) else db


SETTINGS = (("cold", 30), ("cold", 8), ("warm", 15), ("warm", 4))  # (start, patience); budget 60


def efficiency(ds, seeds: int) -> list[dict]:  # type: ignore[no-untyped-def]
    """Per exhaustive bucket, for the heuristic's order and the learned model's (trained
    without the kernel): benchmarks until the best-looking config is within 3% with the
    order alone, and the ``model`` strategy started from that order (budget 60, patience
    30 cold / 15 warm as the example's recipe has it, and 8 / 4; from the learned order,
    refitting the model's scores to the measurements as the tuner does), its benchmarks
    spent and how often its final pick (5 finalists, 5 rounds) is within 3%."""
    from sample_efficiency import finalize, load_table, replay

    from aot.costmodel.evaluate import without
    from aot.costmodel.model import best_first
    from aot.tune import strategies

    table = load_table(DATA / EXHAUSTIVE)
    out = []
    exhaustive = str(DATA / EXHAUSTIVE)  # a group's db is its database's path, as loaded
    for family in sorted({e.family for e in ds.examples if e.group.db == exhaustive}):
        model = without(ds.examples, family)
        mine = sorted((e for e in ds.examples if e.family == family and e.group.db == exhaustive),
                      key=lambda e: dict(e.group.problem)["M"])  # fmt: skip
        prev_top: dict[str, list] = {}
        for e in mine:
            m = dict(e.group.problem)["M"]
            t = table[(e.group.kernel, m)]
            truth, best, sigma = t["truth"], t["best"], t["sigma"]
            by_id = {c.id: c for c in e.rows.configs}
            unseen = [False] * len(e.rows.configs)  # the tuner does not demote spills
            scores = model.score(e.rows.matrix)
            orders = {
                "heuristic": [by_id[i] for i in e.heuristic],
                "learned": [e.rows.configs[i] for i in best_first(scores, unseen)],
            }  # fmt: skip
            # the tuner refits the learned model's scores to the bucket's measurements
            priors = {"heuristic": None,
                      "learned": dict(zip(e.rows.configs, scores, strict=True))}  # fmt: skip
            row = {"kernel": e.group.kernel, "M": m, "configs": len(e.rows.configs)}
            for name, cands in orders.items():
                n = min(150, len(cands))
                hits = []
                for seed in range(seeds):
                    g = strategies.Grid(cands, budget=len(cands), patience=len(cands), seed=seed)
                    hit, _ = replay(g, truth, sigma, random.Random(1000 + seed), best, n)
                    hits.append(hit if hit is not None else n + 1)
                row[f"{name}_pick"] = truth[cands[0].id] / best
                row[f"{name}_to3"] = statistics.median(hits)
                for start, patience in SETTINGS:
                    warm = prev_top.get(name, []) if start == "warm" else []
                    used, w3 = [], 0
                    for seed in range(seeds):
                        rng = random.Random(2000 + seed)
                        s = strategies.make("model", cands, budget=60, patience=patience,
                                            seed=seed, warm=warm, prior=priors[name])  # fmt: skip
                        _, seen = replay(s, truth, sigma, rng, best, 60)
                        pick = finalize(seen, truth, sigma, rng, 5, 5)
                        used.append(len(seen))
                        w3 += truth[pick.id] <= best * 1.03
                    row[f"{name}_{start}{patience}_used"] = statistics.median(used)
                    row[f"{name}_{start}{patience}_within3"] = w3 / seeds
                prev_top[name] = sorted(cands, key=lambda c: truth[c.id])[:3]
            out.append(row)
    return out


def print_efficiency(rows: list[dict]) -> None:
    print("\nTuning sample efficiency, heuristic order (H) against the learned model's (L, trained "
          "without the kernel),\nreplayed on the exhaustive H200 table; `model` strategy, budget "
          "60; cells: benchmarks used / % of seeds whose pick is within 3%")  # fmt: skip
    cols = [f"{s} p{p}" for s, p in SETTINGS]
    print(f"{'kernel':<8}{'M':>6}{'space':>6}{'pick H/L':>14}{'to 3% H/L':>11}"
          + "".join(f"{c + ' H':>14}{c + ' L':>14}" for c in cols))  # fmt: skip
    for r in rows:
        cells = "".join(
            f"{r[f'{o}_{s}{p}_used']:>8.0f}/{100 * r[f'{o}_{s}{p}_within3']:>3.0f}%"
            + " " * 1 for s, p in SETTINGS for o in ("heuristic", "learned")
        )  # fmt: skip
        print(f"{r['kernel']:<8}{r['M']:>6}{r['configs']:>6}"
              f"{r['heuristic_pick']:>7.2f}/{r['learned_pick']:.2f}"
              f"{r['heuristic_to3']:>6.0f}/{r['learned_to3']:<4.0f}{cells}")  # fmt: skip
    for kernel in sorted({r["kernel"] for r in rows}):
        mine = [r for r in rows if r["kernel"] == kernel]
        for o in ("heuristic", "learned"):
            parts = [
                f"to 3% by the order alone {statistics.median(r[f'{o}_to3'] for r in mine):.0f}"
            ]
            for s, p in SETTINGS:
                k = f"{o}_{s}{p}"
                used = statistics.median(r[k + "_used"] for r in mine)
                within = 100 * statistics.mean(r[k + "_within3"] for r in mine)
                parts.append(f"{s} p{p}: used {used:.0f}, within 3% {within:.0f}%")
            print(f"{kernel}, {o} order, median over buckets: " + "; ".join(parts))


def print_in_sample(held_out, inside) -> None:  # type: ignore[no-untyped-def]
    """Leave-one-kernel-out's figures beside those of one model trained on every kernel, each
    bucket's own included (``evaluate.in_sample``): the held-out misses it gets right want
    no feature."""
    from aot.costmodel.evaluate import geomean

    print("\nThe same buckets picked by one model trained on every kernel, each bucket's own "
          "included (what the features can tell apart):\n")  # fmt: skip
    print("| model | geomean | worst | within 1.25× |\n|---|---:|---:|---:|")
    for name, rs in (("kernel held out", held_out), ("every kernel (in sample)", inside)):
        m = [r.model for r in rs]
        print(f"| {name} | {geomean(m):.3f}× | {max(m):.2f}× | "
              f"{sum(x <= 1.25 for x in m)}/{len(m)} |")  # fmt: skip
    for a, b in zip(held_out, inside, strict=True):
        assert a.example is b.example
        if a.model > 1.25:
            g = a.example.group
            where = " ".join(f"{k}={v}" for k, v in (*g.dtypes, *g.problem))
            print(f"  held-out miss {a.example.label} {where}: {a.model:.2f}× held out, "
                  f"{b.model:.2f}× in sample")  # fmt: skip


def by_database(results) -> str:  # type: ignore[no-untyped-def]
    """The first table's columns per database rather than per kernel."""
    from aot.costmodel.evaluate import table

    relabelled = [dataclasses.replace(r, example=dataclasses.replace(r.example,
                  label=under_data(r.example.group.db))) for r in results]  # fmt: skip
    lines = table(relabelled).splitlines()
    head = lines[0].replace("kernel held out", "database")
    return "\n".join([head, *lines[1 : lines.index("")]])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--buckets", action="store_true", help="print every bucket")
    ap.add_argument(
        "--add",
        type=Path,
        action="append",
        default=[],
        metavar="DB",
        help="another database to train and evaluate on (repeatable)",
    )
    args = ap.parse_args()
    dbs = [*DBS, *args.add]

    from aot.costmodel import dataset
    from aot.costmodel.evaluate import buckets, in_sample, leave_one_out, table
    from aot.env import from_environ
    from aot.errors import AotcError

    try:
        ds = dataset.load(dbs, recipes(dbs), from_environ())
    except AotcError as exc:  # an --add that is missing or no tuning database: say so
        sys.exit(f"costmodel_eval: {exc}")
    results = leave_one_out(ds)
    print(f"leave-one-kernel-out: {len({e.family for e in ds.examples})} kernels, "
          f"{len(results)} buckets scored ({len(ds.examples)} with duplicates, "
          f"{ds.unmatched} unmatched)")  # fmt: skip
    stale = ", ".join(f"{k} {n}" for k, n in ds.stale) or "none"
    print(f"records dropped as measurements of variants the recipes no longer compile: {stale}\n")
    print(table(results))
    print("\nThe same picks by database (a bucket two databases measured counts once, on the "
          "one that timed more configs):\n")  # fmt: skip
    print(by_database(results))
    if args.buckets:
        print("\n" + buckets(results))
    inside = in_sample(ds)
    print_in_sample(results, inside)
    eff = efficiency(ds, args.seeds)
    print_efficiency(eff)
    if args.json:
        args.json.write_text(json.dumps({
            # "in_sample": the model trained on every kernel, this bucket's own included
            # "name", "source", "arch", "pick", "fastest": benchmarks/costmodel_remeasured.py
            # finds the bucket and its two configs in the other databases by them
            "loo": [{"kernel": r.example.label, "db": under_data(r.example.group.db),
                     "name": r.example.group.kernel, "source": r.example.group.source,
                     "arch": r.example.group.arch,
                     "dtypes": dict(r.example.group.dtypes),
                     "problem": dict(r.example.group.problem), "configs": len(r.example.times),
                     "model": r.model, "heuristic": r.heuristic, "random": r.random,
                     "spilled": r.spilled, "in_sample": i.model, "pick": r.pick,
                     "fastest": r.fastest, "shipped": r.shipped,
                     "shipped_full": r.shipped_full}
                    for r, i in zip(results, inside, strict=True)],
            "stale_records": dict(ds.stale),
            "unmatched_buckets": ds.unmatched,
            "efficiency": eff,
        }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
