"""Would more features bring the cost model's leave-one-kernel-out misses within 1.25×?

    python benchmarks/costmodel_features_probe.py [loads other warps_per_sm loads+other ...]
    python benchmarks/costmodel_features_probe.py smem_sm kinds
    python benchmarks/costmodel_features_probe.py sizes
    python benchmarks/costmodel_features_probe.py steps critical_rel fixed

Each argument is a set of candidate columns (joined by "+") appended to the shipped
features; for each set, leave-one-kernel-out is run as benchmarks/costmodel_eval.py runs
it (the same databases, recipes and model settings), and the geomean, the worst bucket,
how many buckets are within 1.25× (also through a CPU-only build's compile-free first
pass, ``evaluate.shortlisted``) and the misses are printed, the shipped features first.
Each run takes about five minutes on the 2-core CPU machine once the dataset is loaded
(its compiles go through the compile cache). No GPU.

The candidates, from what the misses looked like (benchmarks/RESULTS.md, issue 19):

- ``loads``: log2 of the bytes a program reads over its block: how many block loads one
  program makes (a K loop's trip count, in a matmul);
- ``other``: log2 of the product of the integer meta-parameters that are neither tile nor
  block (GROUP_SIZE_M, which no feature sees, and the MoE's tied rows);
- ``warps_per_sm``: log2 of the warps the grid launches per SM (few programs with many
  warps, as in paged_decode_reduce, where one warp is fastest).

Added later (the fourteenth session, after the 4-stage attention picks):

- ``smem_sm``: shared memory a block uses times the blocks resident per SM, over the SM's:
  the pipeline buffers in flight on an SM;
- ``kinds``: what the kernel is made of, from its source and the jit functions it calls
  (no compiling): whether it calls ``dot`` (or a Gluon MMA), a reduction, a
  transcendental, an atomic, and whether it loops; the same for every config of a kernel,
  so they only condition the other columns on the kind of kernel.

Added in the seventeenth session, when the model dropped them:

- ``sizes`` (or any of its columns alone): ``features.SIZES``, the problem's and a
  program's absolute sizes (programs, tune.flops and tune.bytes, and those per program),
  which the model read until then.

Added in the twenty-third session, for the misses at few programs (``mm`` at 128 rows,
where 128 programs of 32 × 32 tiles lose to 16 of 128 × 64) and the split-KV reduce:

- ``steps``: log2 of the loop's trip count, the largest size the grid does not read over
  the product of the ``*BLOCK*`` meta-parameters it does not read (K over BLOCK_K);
- ``critical_rel``: log2 of the programs per SM (at least one) times those steps, the
  serial work on the busiest SM, less the bucket's least;
- ``fixed``: log2 of the block's elements per thread counting the recipe's ``fixed``
  power-of-two sizes the grid does not read (the reduce's HEAD_DIM and NUM_SPLITS, which
  are no meta-parameters: its block reads as one element).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import statistics
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costmodel_eval import DBS, RECIPES  # noqa: E402

from aot.costmodel import dataset  # noqa: E402
from aot.costmodel.data import Catalog, Group, Resolved  # noqa: E402
from aot.costmodel.dataset import Example  # noqa: E402
from aot.costmodel.evaluate import Scored, leave_one_out  # noqa: E402
from aot.costmodel.features import NAMES, SIZES, work_units  # noqa: E402
from aot.costmodel.table import Rows  # noqa: E402
from aot.env import from_environ  # noqa: E402
from aot.kernel_env import EnvError, env_at  # noqa: E402
from aot.plan import Config  # noqa: E402

# the dataset's columns: the model's, then the sizes it does not read (candidates here)
COLUMNS = (*NAMES, *(n for n, _ in SIZES))
AT = {n: i for i, n in enumerate(COLUMNS)}


def _other(c: Config, row: Sequence[float]) -> float:
    vals = [int(v) for k, v in c.meta if isinstance(v, int) and not isinstance(v, bool)
            and "BLOCK" not in k.upper() and v > 0]  # fmt: skip
    return math.log2(math.prod(vals)) if vals else 0.0


# what a kernel's source calls, by kind: the attribute or name of the call
CALLS = {"dot": {"dot", "dot_scaled", "warpgroup_mma", "mma_v2", "tcgen05_mma"},
         "reduce": {"sum", "max", "min", "argmax", "argmin", "reduce", "cumsum",
                    "associative_scan"},
         "math": {"exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh",
                  "erf"}}  # fmt: skip
MIX: dict[str, set[str]] = {}  # a kernel's source hash: the kinds of call it makes


def _trees(fn: object, seen: set[object]) -> list[ast.AST]:
    """The syntax trees of a jit function and of the jit functions it calls by name."""
    while hasattr(fn, "fn") and not inspect.isfunction(fn):
        fn = fn.fn
    if not inspect.isfunction(fn) or fn in seen:
        return []
    seen.add(fn)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    called = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} & fn.__globals__.keys()
    jit = [fn.__globals__[n] for n in sorted(called) if hasattr(fn.__globals__[n], "fn")]
    return [tree, *(t for f in jit for t in _trees(f, seen))]


def op_mix(fn: object) -> set[str]:
    """The kinds of call ``fn`` makes: those of ``CALLS``, "atomic", and "loop"."""
    kinds: set[str] = set()
    for node in (n for t in _trees(fn, set()) for n in ast.walk(t)):
        if isinstance(node, (ast.For, ast.While)):
            kinds.add("loop")
        f = node.func if isinstance(node, ast.Call) else None
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        kinds |= {k for k, names in CALLS.items() if name in names}
        if name.startswith("atomic"):
            kinds.add("atomic")
    return kinds


def _kind(kind: str) -> Callable[[Example, Config, Sequence[float]], float]:
    return lambda e, c, r: float(kind in MIX[e.family])


def _column(name: str) -> Callable[[Example, Config, Sequence[float]], float]:
    return lambda e, c, r: r[AT[name]]


WHERE: dict[tuple[object, ...], Resolved] = {}  # each example's kernel, bucket, GPU (main)


def _key(g: Group) -> tuple[object, ...]:
    return (g.db, g.kernel, g.source, g.device, g.arch, g.dtypes, g.problem)


def _free(e: Example, c: Config) -> tuple[float, float, list[int]]:
    """At ``e``'s bucket under ``c``: the loop's trip count (``steps``), the grid's units of
    work per SM (at least one), and the recipe's fixed power-of-two sizes the grid does
    not read."""
    where = WHERE[_key(e.group)]
    kr, gpu = where.inst.kernel, where.gpu
    read = set().union(*(g.names for g in kr.grid))
    fixed = [v for k, v in kr.fixed.items() if k not in read and isinstance(v, int)
             and not isinstance(v, bool) and v > 1 and v & (v - 1) == 0]  # fmt: skip
    try:
        point = dict(zip(kr.buckets, where.bucket, strict=True))
        env = env_at(kr, point, c, {**gpu.properties()}, dict(where.inst.dtypes))
        programs = math.prod(max(int(g.evaluate(env)), 0) for g in kr.grid)
    except (EnvError, ArithmeticError, ValueError, TypeError):
        return math.nan, math.nan, fixed
    sizes = [v for n in (*kr.sizes, *kr.size_exprs, *point)
             if n not in read and isinstance(v := env.get(n), int) and v > 0]  # fmt: skip
    blocks = [v for k, v in c.meta if k not in read and "BLOCK" in k.upper()
              and isinstance(v, int) and not isinstance(v, bool) and v > 1]  # fmt: skip
    steps = math.ceil(max(1.0, max(sizes) / math.prod(blocks))) if sizes and blocks else 1
    units = work_units(kr.grid, env, programs)
    return float(steps), max(1.0, units / gpu.sms) if units else math.nan, fixed


def _steps(e: Example, c: Config, r: Sequence[float]) -> float:
    return math.log2(_free(e, c)[0])


def _critical(e: Example, c: Config, r: Sequence[float]) -> float:
    steps, per_sm, _ = _free(e, c)
    return math.log2(steps * per_sm)


def _fixed(e: Example, c: Config, r: Sequence[float]) -> float:
    return r[AT["log2_block_per_thread"]] + math.log2(math.prod(_free(e, c)[2]))


CANDIDATES: dict[str, Callable[[Example, Config, Sequence[float]], float]] = {
    "loads": lambda e, c, r: r[AT["log2_bytes_per_program"]] - r[AT["log2_block"]],
    "other": lambda e, c, r: _other(c, r),
    "warps_per_sm": lambda e, c, r: (
        r[AT["log2_programs"]] + math.log2(c.num_warps) - r[AT["log2_sms"]]
    ),
    "smem_sm": lambda e, c, r: r[AT["shared_frac"]] * r[AT["blocks_per_sm"]],
    **{f"kind_{k}": _kind(k) for k in (*CALLS, "atomic", "loop")},
    **{n: _column(n) for n, _ in SIZES},
    "steps": _steps,
    "critical": _critical,
    "fixed": _fixed,
}
# candidates relative to their bucket: the base candidate less the bucket's least
RELATIVE = {"critical_rel": "critical"}
SETS = {"kinds": [f"kind_{k}" for k in (*CALLS, "atomic", "loop")],
        "sizes": [n for n, _ in SIZES]}  # shorthands  # fmt: skip


def extended(ds: dataset.Dataset, names: Sequence[str]) -> dataset.Dataset:
    """``ds`` (loaded with ``COLUMNS``) with the model's columns and the candidate columns
    ``names`` in every row."""

    def column(e: Example, rows: Rows, name: str) -> list[float]:
        f = CANDIDATES[RELATIVE.get(name, name)]
        xs = [f(e, c, row) for c, row in zip(rows.configs, rows.matrix, strict=True)]
        finite = [x for x in xs if math.isfinite(x)]
        if name in RELATIVE and finite:
            xs = [x - min(finite) for x in xs]
        return xs

    def more(e: Example, rows: Rows) -> Rows:
        columns = [column(e, rows, n) for n in names]
        matrix = tuple(tuple(row[: len(NAMES)]) + tuple(col[i] for col in columns)
                       for i, row in enumerate(rows.matrix))  # fmt: skip
        return dataclasses.replace(rows, matrix=matrix)

    examples = [dataclasses.replace(e, rows=more(e, e.rows), pending=more(e, e.pending))
                for e in ds.examples]  # fmt: skip
    return dataclasses.replace(ds, examples=tuple(examples))


def report(results: list[Scored], label: str, seconds: float) -> None:
    ratios = [r.model for r in results]
    misses = [r for r in results if r.model > 1.25]
    geomean = math.exp(statistics.fmean(math.log(x) for x in ratios))
    shipped = [r.shipped for r in results]  # through the build's compile-free first pass
    print(f"{label} ({seconds:.0f} s): geomean {geomean:.3f}×, worst {max(ratios):.2f}×, "
          f"within 1.25× {len(ratios) - len(misses)}/{len(ratios)}; the first pass replayed "
          f"{statistics.geometric_mean(shipped):.3f}×, worst {max(shipped):.2f}×, within "
          f"{sum(x <= 1.25 for x in shipped)}", flush=True)  # fmt: skip
    for r in misses:
        print(f"    {r.example.label} {dict(r.example.group.problem)} {r.model:.2f}×")


def main() -> None:
    sets = [[m for n in arg.split("+") if n for m in SETS.get(n, [n])] for arg in sys.argv[1:]]
    unknown = {n for s in sets for n in s} - CANDIDATES.keys() - RELATIVE.keys()
    if unknown:
        sys.exit(f"unknown candidates {sorted(unknown)}; known: {sorted(CANDIDATES)}, "
                 f"{sorted(RELATIVE)}, {sorted(SETS)}")  # fmt: skip
    catalog = Catalog(RECIPES)
    for plan in catalog.plans:
        MIX.update({s.cache_key: op_mix(s.fn) for s in plan.sources.values()})
    ds = dataset.load(DBS, RECIPES, from_environ(), names=COLUMNS)
    for e in ds.examples:
        if (where := catalog.resolve(e.group)) is not None:
            WHERE[_key(e.group)] = where
    for names in [[], *sets]:
        start = time.monotonic()
        results = leave_one_out(extended(ds, names), names=(*NAMES, *names))
        report(results, "+".join(names) or "shipped features", time.monotonic() - start)


if __name__ == "__main__":
    main()
