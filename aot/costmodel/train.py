"""``aotc cost-model train`` and ``eval``: from tuning databases to a model file with its
provenance, and the leave-one-kernel-out table."""

from __future__ import annotations

import datetime
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from loader.format import write_atomic

from .. import __version__
from ..env import Environment
from ..errors import UsageError
from .dataset import Dataset, load
from .evaluate import buckets, fit, geomean, in_sample, leave_one_out, table
from .features import NAMES
from .model import MEMBERS, PARAMS, ROUNDS, VERSION

# Folders never searched for recipes: environments, caches, build outputs.
SKIP = {"site-packages", "node_modules", "artifacts", "__pycache__", "dist", "build"}


@dataclass(frozen=True)
class Trained:
    model: Path
    provenance: Path
    buckets: int
    rows: int
    kernels: int
    unmatched: int
    records: int


def recipe_paths(given: Sequence[Path], cwd: Path) -> list[Path]:
    """The recipes to resolve records with: those given (files or folders), else every
    ``*.toml`` under the current folder outside hidden and environment folders."""
    if given:
        return list(given)
    return sorted(
        p for p in cwd.rglob("*.toml")
        if p.is_file() and not any(part.startswith(".") or part in SKIP
                                   for part in p.relative_to(cwd).parts[:-1])
    )  # fmt: skip


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def provenance(ds: Dataset) -> dict[str, object]:
    import lightgbm
    import triton

    per_db: dict[str, int] = {}
    for e in ds.examples:
        per_db[e.group.db] = per_db.get(e.group.db, 0) + 1
    return {
        "model": f"cost model v{VERSION}",
        "aotc": __version__,
        "triton": triton.__version__,
        "lightgbm": lightgbm.__version__,
        "date": datetime.date.today().isoformat(),
        "databases": [
            {"file": str(db), "sha256": sha256(db), "buckets": per_db.get(str(db), 0)}
            for db in ds.databases
        ],
        "records": ds.records,
        "buckets": len(ds.examples),
        "rows": sum(len(e.times) for e in ds.examples),
        "kernels": sorted({e.label for e in ds.examples}),
        "unmatched_buckets": ds.unmatched,
        # records of variants the recipes no longer compile for their config, per kernel
        "stale_records": dict(ds.stale),
        "features": list(NAMES),
        "params": {
            "rounds": ROUNDS,
            "members": MEMBERS,
            "weights": "every kernel alike (dataset.kernel_weights)",
            "compile_free_members": (
                f"{MEMBERS}, on the same configs' rows with their "
                "cubins' features unknown (the build's shortlist)"
            ),
            **{k: v for k, v in PARAMS.items() if k != "label_gain"},
        },
    }


def train_file(
    dbs: Sequence[Path], recipes: Sequence[Path], out: Path, env: Environment
) -> Trained:
    ds = load(dbs, recipes, env)
    model = fit(ds.examples)
    prov = out.with_suffix(".json")
    write_atomic(prov, (json.dumps(provenance(ds), indent=1) + "\n").encode())
    write_atomic(out, model.text.encode())
    return Trained(out, prov, len(ds.examples), sum(len(e.times) for e in ds.examples),
                   len({e.family for e in ds.examples}), ds.unmatched, ds.records)  # fmt: skip


def eval_text(
    dbs: Sequence[Path], recipes: Sequence[Path], env: Environment, per_bucket: bool
) -> str:
    ds = load(dbs, recipes, env)
    kernels = len({e.family for e in ds.examples})
    if kernels < 2:
        raise UsageError(
            f"leave-one-kernel-out needs buckets of at least two kernels to train on one and "
            f"score the other; these databases have {kernels} that the recipes define "
            f"({ds.unmatched} measured buckets matched no recipe: pass --recipe)"
        )
    results = leave_one_out(ds)
    text = table(results)
    inside = [r.model for r in in_sample(ds)]
    within = sum(x <= 1.25 for x in inside)
    text += (f"\n\nin sample (one model trained on every kernel, each bucket's own included: "
             f"what the features can tell apart): geomean {geomean(inside):.3f}×, worst "
             f"{max(inside):.2f}×, within 1.25× {within}/{len(inside)}")  # fmt: skip
    if per_bucket:
        text += "\n\n" + buckets(results)
    head = (f"leave-one-kernel-out over {kernels} kernels, {len(results)} buckets "
            f"({ds.unmatched} measured buckets matched no recipe): the pick's measured time "
            "over the bucket's best")  # fmt: skip
    return head + "\n\n" + text
