"""The shipped cost model's CPU-only picks on held-out library kernels, scored by the H200.

    python benchmarks/costmodel_heldout.py [--src liger=DIR ...] [--json out.json] [--buckets]

The model aotc ships (``aot.costmodel.predict.shipped``) was trained on the databases of
benchmarks/costmodel_eval.py only. The kernels of benchmarks/heldout/ (Liger-Kernel,
lightllm, flash-linear-attention, mamba_ssm, unsloth, unchanged) it has never seen; their
H200 tuning databases are committed in benchmarks/data/h200-heldout-*/. For each measured
bucket: the model's pick among the configs the database timed (the best-scored one that
does not spill, when one does not), its measured time over the bucket's best; the same for
the analytical heuristic's pick and a random one (the mean over the timed configs), as
``aot.costmodel.evaluate.score`` scores them. Where the tuner timed fewer configs than the
recipe's space holds at a bucket, "best" is the best timed, and the model's pick over the
whole space (what a CPU-only build ships) is checked for having been timed.

Each library's recipes read its sources as ``../src/PACKAGE/...``: the script copies them
into a work folder beside a link to the package, as benchmarks/heldout/run_library.sh lays
them out on the GPU. ``--src LIB=DIR`` names the folder holding the package (and any
dependency it imports: einops for fla); by default ``.gpu/heldout-src/LIB``. Filling it
from each library's checkout at the commit its data README names, as its run.sh says:

    liger     git archive ead96b61 src/liger_kernel | tar -x -C D && mv D/src/liger_kernel D/
    lightllm  git archive fc72ffab lightllm/models/llama/triton_kernel/{rotary_emb,
              gqa_flash_decoding_stage1,gqa_flash_decoding_stage2}.py | tar -x -C D
              (then empty __init__.py files down to triton_kernel/)
    fla       git archive bc3b101d fla | tar -x -C D; pip install --target D einops
    mamba     git archive e9594ce mamba_ssm/ops/triton/{selective_state_update,softplus,
              ssd_bmm}.py mamba_ssm/utils/determinism.py | tar -x -C D (and __init__.py files)
    unsloth   git archive 015bdef0d9 and the files benchmarks/heldout/unsloth/run.sh names

unsloth's files raise on import without a GPU unless UNSLOTH_ALLOW_CPU=1 (unsloth's own
switch, which this script sets). A library whose folder is missing, or whose recipes do
not plan here, is reported as skipped. Compiles every timed config's variant (through
AOTC_CACHE_DIR; about 1.5 min on 2 cores); needs lightgbm. No GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aot.costmodel.data import Resolved  # noqa: E402
from aot.env import Environment, from_environ  # noqa: E402
from aot.plan import Plan  # noqa: E402
from aot.select import Chooser, heuristic_chooser  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
HELDOUT = ROOT / "benchmarks" / "heldout"

ENVIRON = {"unsloth": {"UNSLOTH_ALLOW_CPU": "1"}}  # set before a library's files are imported
# library: (its package, its databases under data/h200-heldout-LIB/). lightllm's decode and
# mamba's bmm_chunk were tuned again after their recipes' specialization change
# (spec-fix/: the earlier databases timed variants the recipes no longer compile).
LIBRARIES = {
    "liger": ("liger_kernel", ["cross_entropy", "kl_div", "rms_norm", "rope", "swiglu"]),
    "lightllm": ("lightllm", ["spec-fix/decode", "rotary"]),
    "fla": ("fla", ["cumsum", "logsumexp"]),
    "mamba": ("mamba_ssm", ["spec-fix/bmm_chunk", "selective_state_update"]),
    "unsloth": ("unsloth", ["rms_layernorm", "rope", "swiglu"]),
}
NOT_SCORED = {  # recipes with no bucket to rank, and why
    "liger": "rms_norm_rule (Liger's warps as a constraint: one config per bucket)",
}


@dataclass
class Bucket:
    library: str
    kernel: str
    db: str
    dtypes: dict
    problem: dict
    timed: int  # configs timed that compiled here
    space: int  # the recipe's candidates at the bucket
    model: float  # pick's time / best timed
    heuristic: float
    random: float
    spilled: bool  # the model's pick spills while a timed config does not
    heuristic_pick_timed: bool  # the heuristic's pick over the whole space was timed
    # what a CPU-only build ships (its compile-free shortlist, then the compiled scores):
    # its time / best timed, None where the database did not time it
    shipped: float | None


def lay_out(lib: str, folder: Path, work: Path) -> list[Path]:
    """The library's recipes copied to ``work/LIB/r`` beside ``work/LIB/src/PACKAGE`` (a
    link into ``folder``); what its imports need goes on sys.path. Returns the recipes."""
    package, dbs = LIBRARIES[lib]
    r, src = work / lib / "r", work / lib / "src"
    r.mkdir(parents=True)
    src.mkdir()
    (src / package).symlink_to((folder / package).resolve(), target_is_directory=True)
    for f in [*HELDOUT.joinpath(lib).glob("*.toml"), HELDOUT / lib / "calls.py"]:
        shutil.copy(f, r)
    os.environ.update(ENVIRON.get(lib, {}))
    stubs = HELDOUT / lib / "stubs"  # stand-ins for packages the kernel files import
    sys.path[:0] = [str(src), str(r), str(folder.resolve())]
    if stubs.is_dir():
        sys.path.append(str(stubs))
    return [r / f"{Path(db).name}.toml" for db in dbs]


def evaluate(lib: str, recipes: list[Path], env: Environment) -> tuple[list[Bucket], dict]:
    """The library's buckets scored, and what could not be (unmatched, skipped recipes)."""
    from aot.costmodel import dataset
    from aot.costmodel.data import Catalog
    from aot.costmodel.evaluate import evaluated, score
    from aot.costmodel.predict import shipped
    from aot.heuristic import rank

    dbs = [DATA / f"h200-heldout-{lib}" / f"{db}.tunedb.jsonl.gz" for db in LIBRARIES[lib][1]]
    catalog = Catalog(recipes)
    ds = dataset.load(dbs, recipes, env)
    out = []
    for e in evaluated(ds):
        s = score(shipped(), e)
        r = catalog.resolve(e.group)
        assert r is not None  # dataset.load resolved it through an equal catalog
        pick = shipped_pick(r, env)
        times = e.group.times
        out.append(Bucket(lib, e.label, Path(e.group.db).name, dict(e.group.dtypes),
                          dict(e.group.problem), len(e.times), len(r.configs), s.model,
                          s.heuristic, s.random, s.spilled, rank(r.inst, r.bucket)[0].id in times,
                          times[pick] / e.group.best if pick in times else None))  # fmt: skip
    left = {"records": ds.records, "unmatched_buckets": ds.unmatched,
            "stale_records": dict(ds.stale), "recipes_not_planned": catalog.skipped}  # fmt: skip
    return out, left


def shipped_pick(r: Resolved, env: Environment) -> str | None:
    """The config a CPU-only build ships at the bucket: the build's own first choice
    (``predict.chooser``: every bucket's shortlist scored before compiling, all of them
    compiled at once, each bucket scored again with what is known), which can differ from
    the model's pick with every candidate compiled; None where it has none."""
    picks = build_chooser(r.plan, env)(r.inst, r.bucket)
    return picks[0].config.id if picks else None


_CHOOSERS: dict[int, Chooser] = {}


def build_chooser(plan: Plan, env: Environment) -> Chooser:
    """The chooser a CPU-only build of ``plan`` uses, one per plan (it compiles each
    instance's shortlists on first use)."""
    from aot.costmodel import predict
    from aot.kernels import cached_ranker

    if id(plan) not in _CHOOSERS:
        fallback = heuristic_chooser(cached_ranker(plan))
        _CHOOSERS[id(plan)] = predict.chooser(plan, replace(env, predict="cost-model"), fallback)
    return _CHOOSERS[id(plan)]


def summary(bs: list[Bucket]) -> dict:
    from aot.costmodel.evaluate import geomean

    m, h = [b.model for b in bs], [b.heuristic for b in bs]
    shipped = [b.shipped for b in bs if b.shipped is not None]
    return {"buckets": len(bs), "timed": sorted({b.timed for b in bs}),
            "space": sorted({b.space for b in bs}),
            "model_geomean": geomean(m), "model_worst": max(m),
            "model_within_1.25": sum(x <= 1.25 for x in m),
            "heuristic_geomean": geomean(h), "heuristic_worst": max(h),
            "heuristic_within_1.25": sum(x <= 1.25 for x in h),
            "random_geomean": geomean([b.random for b in bs]),
            "model_pick_untimed": sum(b.shipped is None for b in bs),
            "heuristic_pick_untimed": sum(not b.heuristic_pick_timed for b in bs),
            "model_spilled": sum(b.spilled for b in bs),
            "shipped_geomean": geomean(shipped) if shipped else None,
            "shipped_worst": max(shipped, default=None),
            "shipped_within_1.25": sum(v <= 1.25 for v in shipped)}  # fmt: skip


def row(label: str, s: dict) -> str:
    def span(xs: list[int]) -> str:
        return str(xs[0]) if len(xs) == 1 else f"{xs[0]}–{xs[-1]}"

    n = s["buckets"]
    cells = [label, str(n), f"{span(s['timed'])}/{span(s['space'])}",
             f"{s['model_geomean']:.3f}×", f"{s['model_worst']:.2f}×",
             f"{s['model_within_1.25']}/{n}", f"{s['heuristic_geomean']:.3f}×",
             f"{s['heuristic_worst']:.2f}×", f"{s['heuristic_within_1.25']}/{n}",
             f"{s['random_geomean']:.3f}×", str(s["model_pick_untimed"])]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def table(bs: list[Bucket]) -> tuple[str, dict]:
    """Per kernel, per library and overall, model beside heuristic; and the summaries."""
    lines = ["| kernel | buckets | timed/space | model geomean | model worst | model ≤1.25× | "
             "heuristic geomean | heuristic worst | heuristic ≤1.25× | random geomean | "
             "model's whole-space pick untimed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    sums: dict = {}
    for lib in dict.fromkeys(b.library for b in bs):
        mine = [b for b in bs if b.library == lib]
        for kernel in sorted({b.kernel for b in mine}):
            sums[f"{lib}/{kernel}"] = summary([b for b in mine if b.kernel == kernel])
            lines.append(row(f"{lib} {kernel}", sums[f"{lib}/{kernel}"]))
        sums[lib] = summary(mine)
        lines.append(row(f"*{lib}, all*", sums[lib]))
    if bs:
        sums["all"] = s = summary(bs)
        lines.append(row("**all**", s))
        lines.append(f"\nbuckets whose whole-space pick was not timed: model "
                     f"{s['model_pick_untimed']}, heuristic {s['heuristic_pick_untimed']}; "
                     "the model's pick spills where a "
                     f"timed config does not: {s['model_spilled']}")  # fmt: skip
        timed = s["buckets"] - s["model_pick_untimed"]
        lines.append(f"what a CPU-only build ships (its compile-free shortlist, then scored "
                     f"compiled), at the {timed} buckets where it was timed: geomean "
                     f"{s['shipped_geomean']:.3f}×, worst {s['shipped_worst']:.2f}×, within "
                     f"1.25× {s['shipped_within_1.25']}")  # fmt: skip
    return "\n".join(lines), sums


def print_buckets(bs: list[Bucket]) -> None:
    print("\n| kernel | dtypes | problem | timed/space | model | heuristic | random | shipped |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for b in bs:
        dt = ",".join(f"{k}={v}" for k, v in b.dtypes.items())
        pr = " ".join(f"{k}={v}" for k, v in b.problem.items())
        print(f"| {b.library} {b.kernel} | {dt} | {pr} | {b.timed}/{b.space} | {b.model:.2f}× | "
              f"{b.heuristic:.2f}× | {b.random:.2f}× | "
              f"{'untimed' if b.shipped is None else f'{b.shipped:.2f}×'} |")  # fmt: skip


def sources(given: list[str]) -> dict[str, Path]:
    named = dict(s.split("=", 1) for s in given)
    unknown = set(named) - set(LIBRARIES)
    if unknown:
        sys.exit(f"--src: no held-out library {sorted(unknown)}; the libraries: {list(LIBRARIES)}")
    return {lib: Path(named.get(lib, ROOT / ".gpu" / "heldout-src" / lib)) for lib in LIBRARIES}


def run(folders: dict[str, Path], work: Path, env: Environment) -> tuple[list[Bucket], dict]:
    """Every library scored, or the reason it was skipped."""
    bs: list[Bucket] = []
    libs: dict = {}
    for lib, folder in folders.items():
        package = LIBRARIES[lib][0]
        if not (folder / package).is_dir():
            libs[lib] = {"skipped": f"no {package}/ in {folder}"}
            continue
        mine, left = evaluate(lib, lay_out(lib, folder, work), env)
        if not mine:
            left["skipped"] = "no bucket resolved to a recipe that plans here"
        libs[lib] = {**left, "not_scored": NOT_SCORED.get(lib)}
        bs += mine
    return bs, libs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", action="append", default=[], metavar="LIB=DIR",
                    help="LIB's package's folder (default .gpu/heldout-src/LIB)")  # fmt: skip
    ap.add_argument("--json", type=Path)
    ap.add_argument("--buckets", action="store_true", help="print every bucket")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="aotc-heldout-") as work:
        bs, libs = run(sources(args.src), Path(work), from_environ())
    for lib, info in libs.items():
        print(f"{lib}: {json.dumps(info)}")
    text, sums = table(bs)
    print("\nThe shipped model's picks and the heuristic's, among the configs each H200 "
          "database timed (time / the bucket's best timed):\n")  # fmt: skip
    print(text)
    if args.buckets:
        print_buckets(bs)
    if args.json:
        args.json.write_text(json.dumps({"libraries": libs, "summary": sums,
                                         "buckets": [vars(b) for b in bs]}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
