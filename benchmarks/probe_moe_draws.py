"""Why the tuner and the bench disagree on the gallery MoE at a few tokens (issue 18).

The tuner ranks the bundle's pick (32x128x128, GROUP_SIZE_M 8) 9-14% ahead of the author's
table entry at 2 and 8 tokens, timed over its 4 seeded routing draws; gallery_bench.py,
on 4 draws of its own, finds the two even or the author's 2% ahead. This times both
sides on many independent draws, one draw at a time, so that a ratio that depends on the
draw shows, with what each draw routes (experts reached, most pairs on one expert):

    PYTHONPATH=$PWD python benchmarks/probe_moe_draws.py --bundle moe.aotc --json out.json

Both sides are timed with ``triton.testing.do_bench`` (L2 flushed, median), interleaved,
on the same data; ``ratio`` is the author's time over the bundle's (>= 1: ours is ahead).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes" / "gallery"))


def moe_sizes(ref: Any, tokens: int) -> dict[str, int]:
    """The recipe's literal sizes at ``tokens`` tokens."""
    table = ref.recipe_kernels()["moe"]
    sizes = {k: v for k, v in table["sizes"].items() if not isinstance(v, str)}
    return {**sizes, "num_tokens": tokens}


def draw_row(ref: Any, kernel: Any, tokens: int, seed: int, repeats: int) -> dict[str, Any]:
    import torch
    import triton.testing

    sizes = moe_sizes(ref, tokens)
    torch.manual_seed(seed)
    args = ref.call_args("moe", sizes, {"T": "bf16"}, kernel.launch_config)
    keywords = ref.call_keywords("moe", sizes, kernel)
    routing, _ = ref.moe_routing(args)
    theirs = ref.CONVENTIONS["moe"].jit(args)

    def ours() -> None:
        kernel(*args, **keywords)

    theirs()
    ours()
    torch.cuda.synchronize()
    o_ms: list[float] = []
    t_ms: list[float] = []
    for i in range(repeats):
        pair = [(ours, o_ms), (theirs, t_ms)]
        for fn, times in pair if i % 2 == 0 else pair[::-1]:
            times.append(triton.testing.do_bench(fn, return_mode="median"))
    counts = torch.bincount(routing.reshape(-1), minlength=args[1].shape[0]).tolist()
    o, t = statistics.median(o_ms), statistics.median(t_ms)
    return {"tokens": tokens, "seed": seed, "experts": sum(c > 0 for c in counts),
            "most": max(counts), "counts": counts, "ours_us": o * 1e3, "theirs_us": t * 1e3,
            "ratio": t / o}  # fmt: skip


def methods_row(ref: Any, kernel: Any, tokens: int, draws: int) -> dict[str, Any]:
    """The same draws timed three ways, ours and the author's: do_bench per draw (the
    bench), the tuning worker's timer with the launches rotating over the draws (the
    tuner), and the worker's timer on one draw at a time; each the mean over the draws."""
    import torch
    import triton.testing

    from aot.tune.worker import Worker

    sizes = moe_sizes(ref, tokens)
    sets, jits = [], {}
    for d in range(draws):
        torch.manual_seed(2000 + d)
        args = ref.call_args("moe", sizes, {"T": "bf16"}, kernel.launch_config)
        sets.append(args)
        jits[id(args)] = ref.CONVENTIONS["moe"].jit(args)
    keywords = ref.call_keywords("moe", sizes, kernel)
    worker = Worker(0)
    fns = {"ours": lambda a: kernel(*a, **keywords), "theirs": lambda a: jits[id(a)]()}
    out: dict[str, Any] = {"tokens": tokens, "draws": draws}
    for name, fn in fns.items():
        for a in sets:
            fn(a)
        torch.cuda.synchronize()
        out[f"{name}_do_bench"] = statistics.fmean(
            triton.testing.do_bench(functools.partial(fn, a), return_mode="median") for a in sets
        )
        rotating = worker.time(fn, sets, 10.0, sustain_ms=100)
        out[f"{name}_rotating"] = statistics.fmean(
            statistics.median(rotating[d::draws]) for d in range(draws)
        )
        out[f"{name}_one_at_a_time"] = statistics.fmean(
            statistics.median(worker.time(fn, [a], 10.0, sustain_ms=100)) for a in sets
        )
    for m in ("do_bench", "rotating", "one_at_a_time"):
        out[f"ratio_{m}"] = out[f"theirs_{m}"] / out[f"ours_{m}"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--tokens", default="2,4,8")
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--methods", action="store_true", help="compare the timers instead")
    a = ap.parse_args()
    import reference as ref
    import torch

    import loader

    torch.cuda.init()  # type: ignore[no-untyped-call]
    kernel = loader.open(a.bundle)["moe"]
    if a.methods:
        found = [methods_row(ref, kernel, int(t), 4) for t in a.tokens.split(",")]
        if a.json:
            Path(a.json).write_text(json.dumps(found, indent=1))
        print("tokens  author/ours: do_bench per draw  worker rotating  worker one draw")
        for r in found:
            print(f"{r['tokens']:6}  {r['ratio_do_bench']:27.3f}  {r['ratio_rotating']:15.3f}  "
                  f"{r['ratio_one_at_a_time']:15.3f}")  # fmt: skip
        return
    rows = []
    for tokens in [int(x) for x in a.tokens.split(",")]:
        for d in range(a.draws):
            rows.append(draw_row(ref, kernel, tokens, 1000 + d, a.repeats))
            print(f"[probe_moe_draws] {rows[-1]}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print("tokens  draws  ratio geomean  min   max   | by experts reached: n, geomean ratio")
    for tokens in sorted({r["tokens"] for r in rows}):
        mine = [r for r in rows if r["tokens"] == tokens]
        ratios = [r["ratio"] for r in mine]
        by = {}
        for e in sorted({r["experts"] for r in mine}):
            rs = [r["ratio"] for r in mine if r["experts"] == e]
            by[e] = f"{len(rs)}: {statistics.geometric_mean(rs):.3f}"
        print(f"{tokens:6}  {len(mine):5}  {statistics.geometric_mean(ratios):13.3f}  "
              f"{min(ratios):.3f} {max(ratios):.3f} | {by}")  # fmt: skip


if __name__ == "__main__":
    main()
