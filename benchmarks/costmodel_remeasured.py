"""Do the cost model's held-out scores hold when the buckets are measured again? (issue 19)

Leave one kernel out scores each bucket with one database's times (`costmodel_eval.py`
keeps, per bucket, the database that timed the most configs). Several buckets were timed
again in other committed H200 databases: another tuning of the same recipe, a run after a
change elsewhere. By what `costmodel_eval.py --json` wrote per bucket (the kernel, its
source, dtypes and problem, the model's pick and the bucket's fastest config), this script
finds every other database whose run timed both configs there and reads the pick again
against that run's own fastest config:

    python benchmarks/costmodel_remeasured.py [--eval benchmarks/data/costmodel-eval.json]

It prints how many scored buckets were measured again, how often a run measured again
turns a bucket's verdict (within 1.25× or not) either way, and every bucket past 1.25×
with its readings. Nothing is retrained and no GPU is needed: the databases are the
committed ones (`benchmarks/data/**/*.tunedb.jsonl*`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from costmodel_eval import DATA, DBS, under_data  # noqa: E402

from aot.costmodel.data import Group, groups, read_records  # noqa: E402
from aot.errors import AotcError  # noqa: E402

GOAL = 1.25  # issue 19: within 1.25× of the bucket's best
SCORED = {under_data(str(p)) for p in DBS}  # the databases costmodel_eval.py scores


@dataclass(frozen=True)
class Reading:
    db: str  # the database's path under benchmarks/data
    pick: float  # the model's pick over the run's fastest config (of those it timed)
    configs: int  # configs the run timed


def databases() -> Iterator[tuple[str, list[Group]]]:
    """Every committed database's groups, by its path under benchmarks/data."""
    for path in sorted(DATA.rglob("*.tunedb.jsonl*")):
        try:
            where = under_data(str(path))
            yield where, groups(read_records(path), where)
        except AotcError as exc:
            print(f"skipped: {exc}", file=sys.stderr)


def bucket(r: dict) -> tuple:  # type: ignore[type-arg]
    """A scored row's bucket, as ``groups`` keys it."""
    return (r["name"], r["source"], r["arch"], tuple(sorted(r["dtypes"].items())),
            tuple(sorted(r["problem"].items())))  # fmt: skip


def readings(r: dict, found: list[tuple[str, Group]]) -> list[Reading]:  # type: ignore[type-arg]
    """The model's pick read in each database that timed it and the bucket's fastest config,
    less the run the row was scored on (``r["db"]``: its path under benchmarks/data)."""
    both = {r["pick"], r["fastest"]}
    return [Reading(db, g.times[r["pick"]] / g.best, len(g.times))
            for db, g in found if db != r["db"] and both <= g.times.keys()]  # fmt: skip


def show(r: dict, read: list[Reading]) -> None:  # type: ignore[type-arg]
    """A bucket's scored reading, then each run that timed it again."""
    sizes = " ".join(f"{k}={v}" for k, v in (*r["dtypes"].items(), *r["problem"].items()))
    head = f"{r['kernel']:32} {sizes:58}"
    print(f"{head} {r['model']:.2f}  {r['db']} ({r['configs']})")
    for x in read:
        print(f"{'':{len(head)}} {x.pick:.2f}  {x.db} ({x.configs})")
    if not read:
        print(f"{'':{len(head)}} (not measured again)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eval", type=Path, default=DATA / "costmodel-eval.json")
    args = ap.parse_args()
    try:
        rows = json.loads(args.eval.read_text())["loo"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.exit(f"{args.eval}: not costmodel_eval.py's --json output "
                 f"({type(exc).__name__}: {exc}); write it with "
                 "`python benchmarks/costmodel_eval.py --json FILE`")  # fmt: skip
    if rows and "pick" not in rows[0]:
        sys.exit(f"{args.eval}: no config ids in it (written before 2026-12-05); write it "
                 "again with `python benchmarks/costmodel_eval.py --json FILE`")  # fmt: skip
    if other := sorted({r["db"] for r in rows} - SCORED):
        sys.exit(f"{args.eval}: scored on databases other than the committed ones under "
                 f"benchmarks/data ({', '.join(other[:3])}): file names alone (written before "
                 "2026-12-05), or added with --add; write it again with `python "
                 "benchmarks/costmodel_eval.py --json FILE`")  # fmt: skip
    found: dict[tuple, list[tuple[str, Group]]] = {}  # type: ignore[type-arg]
    for db, gs in databases():
        for g in gs:
            found.setdefault((g.kernel, g.source, g.arch, g.dtypes, g.problem), []).append((db, g))
    read = [readings(r, found.get(bucket(r), [])) for r in rows]
    again = sum(bool(x) for x in read)
    misses = [(r, x) for r, x in zip(rows, read, strict=True) if r["model"] > GOAL]
    flips_in = sum(any(y.pick <= GOAL for y in x) for _, x in misses)
    flips_out = [(r, x) for r, x in zip(rows, read, strict=True)
                 if r["model"] <= GOAL and any(y.pick > GOAL for y in x)]  # fmt: skip
    print(f"{len(rows)} buckets scored held out by kernel ({args.eval.name}); {again} of them "
          f"timed again, pick and fastest config both, in another run")  # fmt: skip
    print(f"  past {GOAL}× as scored, within it in a run measured again: {flips_in}")
    print(f"  within {GOAL}× as scored, past it in a run measured again: {len(flips_out)}\n")
    print(f"The {len(misses)} buckets past {GOAL}×: the model's pick over the fastest config, "
          "as scored and in each run that timed the bucket again (configs timed):\n")  # fmt: skip
    for r, x in misses:
        show(r, x)
    if flips_out:
        print(f"\nWithin {GOAL}× as scored, past it in a run measured again:\n")
        for r, x in flips_out:
            show(r, x)


if __name__ == "__main__":
    main()
