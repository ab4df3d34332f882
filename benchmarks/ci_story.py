"""Issue 19's CI story for the gallery, on the CPU, scored with the H200's measurements.

    python benchmarks/ci_story.py [--kernels rmsnorm,softmax] [--json out.json]

Three builds of each gallery recipe (recipes/gallery/), as a CI without a GPU and one GPU
runner would make them, each through ``aotc build`` as a user runs it:

1. **heuristic**: ``--predict heuristic``, no GPU, no database: the analytical heuristic's
   configs (what a CPU-only build shipped by default before the cost model);
2. **predicted**: the recipe as it is (the cost model is the default predictor), no GPU,
   ``--cost-model`` a model trained here on every committed H200 database *except the
   gallery's*: kernels the model has never seen;
3. **tuned**: the recipe with the GPU runner's tuning database (the committed H200 one,
   as ``aotc merge-db`` would hand it over): the measured configs, the fully tuned bundle;
4. **half tuned**: the same with a database of every other bucket only (each kernel's and
   dtypes' buckets in size order, the even ones kept: a runner that tuned half of them),
   and the held-out model: the other half predicted, calibrated on the measured half
   (``aot/costmodel/calibrate.py``). Its table cell scores those buckets alone, beside
   the predicted build's picks there.

Each bundle's config per bucket is then looked up in that database: its measured time
over the bucket's best measured time (the database's benchmarks and re-measurement
rounds, as the cost model's evaluation reads them). Nothing is timed here: the GPU's
measurements score what each CPU build ships. A pick the database never timed (the MoE
timed 24 of its 144 configs per bucket) is counted, not scored.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from half_db import every_other  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
GALLERY = ROOT / "recipes" / "gallery"
KERNELS = ["act_mul", "linear", "matmul", "moe", "rmsnorm", "softmax", "splitk"]


def training_databases() -> tuple[list[Path], list[Path]]:
    """Every committed H200 database but the gallery's (those of the cost model's own
    evaluation, benchmarks/costmodel_eval.py), and the recipes that resolve them."""
    from costmodel_eval import databases, recipes

    dbs = [db for db in databases(DATA) if db.parent.name != "h200-gallery"]
    return dbs, recipes(dbs)


def choices(bundle: Path) -> dict[tuple[Any, ...], str]:
    """(kernel, dtypes, bucket) -> the config id the bundle ships there."""
    from loader.format import BundleFile
    from loader.manifest import Manifest

    with BundleFile(bundle) as bf:
        m = Manifest.from_json(bf.manifest)
    return {(k.name, tuple(sorted(i.dtypes.items())), tuple(c.bucket)): c.config
            for k in m.kernels for i in k.instances for c in i.choices}  # fmt: skip


def score(recipe: Path, db: Path, bundles: dict[str, Path]) -> list[dict[str, Any]]:
    """Per measured bucket: each bundle's pick's time over the best measured."""
    from aot.costmodel.data import Catalog, groups, read_records

    catalog = Catalog([recipe])
    picks = {name: choices(path) for name, path in bundles.items()}
    half = every_other(db.read_text())[1]
    rows = []
    for g in groups(read_records(db), db.name):
        res = catalog.resolve(g)
        if res is None:
            continue
        key = (g.kernel, g.dtypes, tuple(res.bucket))
        row: dict[str, Any] = {"kernel": g.kernel, "dtypes": dict(g.dtypes),
                               "problem": dict(g.problem), "configs": len(g.times),
                               "in_half": (g.kernel, g.dtypes, g.problem) in half}  # fmt: skip
        for name, chosen in picks.items():
            cid = chosen.get(key)
            row[name] = g.times[cid] / g.best if cid in g.times else None
        rows.append(row)
    return rows


def build_all(name: str, tmp: Path, model: Path) -> dict[str, Path]:
    from aot.build import TuneOptions, build
    from aot.env import from_environ

    env = dataclasses.replace(from_environ(), progress=False, predict=None)
    recipe = GALLERY / f"{name}.toml"
    db = tmp / f"{name}.tunedb.jsonl"  # the GPU runner's database, as handed over
    packed = DATA / "h200-gallery" / f"{name}.tunedb.jsonl.gz"
    db.write_bytes(gzip.decompress(packed.read_bytes()))
    off = TuneOptions(enabled=False)
    out = {
        "heuristic": build(recipe, tmp / f"{name}.heuristic.aotc",
                           dataclasses.replace(env, predict="heuristic"), tmp, off).bundle,
        "predicted": build(recipe, tmp / f"{name}.predicted.aotc",
                           dataclasses.replace(env, cost_model=model), tmp, off).bundle,
        "tuned": build(recipe, tmp / f"{name}.tuned.aotc", env, tmp, TuneOptions(db=db)).bundle,
    }  # fmt: skip
    half = tmp / f"{name}.half.tunedb.jsonl"
    half.write_text(every_other(db.read_text())[0])  # benchmarks/half_db.py
    out["half tuned"] = build(recipe, tmp / f"{name}.half.aotc",
                              dataclasses.replace(env, cost_model=model), tmp,
                              TuneOptions(enabled=False, db=half)).bundle  # fmt: skip
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summary(rows: list[dict[str, Any]], name: str) -> str:
    cells = []
    rest = [r for r in rows if not r["in_half"]]  # the buckets the half database left out
    for step, mine in (("heuristic", rows), ("predicted", rows), ("tuned", rows),
                       ("predicted", rest), ("half tuned", rest)):  # fmt: skip
        xs = [r[step] for r in mine if r[step] is not None]
        within = sum(x <= 1.25 for x in xs)
        unmeasured = len(mine) - len(xs)
        extra = f", {unmeasured} not timed" if unmeasured else ""
        cells.append(f"{geomean(xs):.3f}× / {max(xs, default=float('nan')):.2f}× / "
                     f"{within}/{len(xs)}{extra}")  # fmt: skip
    return f"| {name} | {len(rows)} | " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="aotc-ci-story-") as t:
        tmp = Path(t)
        model = tmp / "heldout.txt"
        dbs, recipes = training_databases()
        from click.testing import CliRunner

        from aot.cli.commands import cli

        argv = ["cost-model", "train", *map(str, dbs), "-o", str(model)]
        for r in recipes:
            argv += ["--recipe", str(r)]
        result = CliRunner().invoke(cli, argv, prog_name="aotc")
        print(result.output.strip().splitlines()[-2], flush=True)
        if result.exit_code != 0:
            raise SystemExit(result.output)
        report: dict[str, Any] = {}
        lines = ["| recipe | buckets | heuristic: geomean / worst / within 1.25× | "
                 "predicted (held-out model) | tuned (the GPU's database) | "
                 "the half not tuned: predicted | the same, calibrated on the tuned half |",
                 "|---|---:|---|---|---|---|---|"]  # fmt: skip
        every: list[dict[str, Any]] = []
        for name in args.kernels.split(","):
            print(f"building {name}: heuristic, predicted, tuned, half tuned ...", flush=True)
            bundles = build_all(name, tmp, model)
            rows = score(GALLERY / f"{name}.toml", tmp / f"{name}.tunedb.jsonl", bundles)
            report[name] = rows
            every += rows
            lines.append(summary(rows, name))
        lines.append(summary(every, "**all**"))
    print("\n" + "\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
