"""One build of a recipe, tuned the default way on this machine's GPU, with the tuner's
online refit of the learned cost model or without it (issue 19): the GPU half of
benchmarks/run_refit_on_gpu.sh.

    python benchmarks/refit_tune.py RECIPE OUT {refit,additive} SEED

``refit``: the tuner as shipped. ``additive``: as it was before the refit, the learned
model's order without its scores, so the ``model`` strategy moves locally by its additive
surrogate. The recipe is copied beside itself with ``seed = SEED`` in every
``[kernel.tune]``; OUT.aotc and OUT.tunedb.jsonl are written.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    args = sys.argv[1:]
    if len(args) != 4 or args[2] not in ("refit", "additive") or not args[3].isdigit():
        sys.exit("usage: python benchmarks/refit_tune.py RECIPE OUT {refit,additive} SEED")
    recipe, out, mode, seed = Path(args[0]), args[1], args[2], int(args[3])
    if not recipe.is_file():
        sys.exit(f"refit_tune: {recipe}: no such recipe")
    text = recipe.read_text().replace("[kernel.tune]\n", f"[kernel.tune]\nseed = {seed}\n")
    copy = recipe.with_name(f"{recipe.stem}.seed{seed}.toml")
    copy.write_text(text)

    from aot.cli.commands import cli
    from aot.costmodel import predict

    if mode == "additive":
        real = predict.tuning_order

        def order(*args, **kw):  # type: ignore[no-untyped-def]
            o = real(*args, **kw)
            return None if o is None else predict.Ordered(o.configs, {})

        predict.tuning_order = order
    try:
        cli.main(["build", str(copy), "-o", f"{out}.aotc", "--db", f"{out}.tunedb.jsonl",
                  "-j", "16", "--no-progress"], prog_name="aotc")  # fmt: skip
    finally:
        copy.unlink()


if __name__ == "__main__":
    main()
