"""Train the cost model aotc ships, again or with your own tuning databases (issue 19).

    python benchmarks/costmodel_train.py [--add DB ...] [--recipe PATH ...] [-o model.txt]

Runs ``aotc cost-model train`` over the committed H200 databases and the recipes that
define their kernels (``costmodel_eval.py``'s ``DBS`` and ``RECIPES``: what leave one kernel
out scores), from the repository root, so that the provenance names each database by its
path in the repository. With no arguments it writes ``aot/costmodel/data/model-v2.txt`` and
its ``.json``, the shipped model, byte for byte (the provenance's date aside). ``--add``
joins a database of yours (a GPU runner's ``aotc build`` database, or several merged with
``aotc merge-db``), ``--recipe`` the recipe or folder that defines its kernels; write such a
model elsewhere (``-o``) and build with it: ``aotc build --cost-model model.txt`` (or
``AOTC_COST_MODEL``). Compiles every timed config's variant once, through the compile
cache: about 15 s with a warm cache, several minutes cold on 2 cores; needs lightgbm.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from costmodel_eval import DBS, RECIPES  # noqa: E402

# the shipped model's path in this repository (costmodel_eval puts ROOT first on the path)
from aot.costmodel.predict import SHIPPED  # noqa: E402


def _here(path: Path) -> str:
    """``path`` as the command run from the repository root should name it."""
    return os.path.relpath(path.resolve(), ROOT)


def train_args(add: list[Path], recipes: list[Path], output: Path) -> list[str]:
    """``aotc cost-model train``'s arguments, to run from the repository root: the
    committed databases first, in ``DBS``'s order, then ``add``."""
    dbs = [_here(p) for p in (*DBS, *add)]
    paths = [x for r in (*RECIPES, *recipes) for x in ("--recipe", _here(r))]
    return ["cost-model", "train", *dbs, *paths, "-o", _here(output)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--add", type=Path, action="append", default=[], metavar="DB",
                    help="a tuning database of yours to train on too (repeatable)")  # fmt: skip
    ap.add_argument("--recipe", type=Path, action="append", default=[], metavar="PATH",
                    help="a recipe or folder defining the added databases' kernels")  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, default=SHIPPED,
                    help="the model to write (default: the shipped one)")  # fmt: skip
    args = ap.parse_args()
    for p in (*args.add, *args.recipe):
        if not p.exists():
            sys.exit(f"{p}: no such file or folder")
    if args.add and args.output.resolve() == SHIPPED:
        sys.exit("--add trains a model of your own: give -o (the shipped model stays as it is)")
    cmd = [sys.executable, "-m", "aot.cli", *train_args(args.add, args.recipe, args.output)]
    sys.exit(subprocess.run(cmd, cwd=ROOT).returncode)


if __name__ == "__main__":
    main()
