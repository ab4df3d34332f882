"""Probe: the split-KV paged decode pair (recipes/decode/paged_attention.py) through
Triton's JIT at the shapes where the bundle trails flash or the copy bandwidth (issue 20),
with up to 32 ranges per sequence (the recipe's NUM_SPLITS) and up to 64, to find where
the recipe should go. Not a benchmark of the bundle: benchmarks/decode_kernels_bench.py
is. (A one-launch form, whose last range per group reduced, was timed by this script at
commit b71ea4c and was slower at every shape: benchmarks/RESULTS.md.)

    python benchmarks/probe_split_kv.py [--json out.json] [--splits 32,64]

Times are CUDA-graph replays (``triton.testing.do_bench_cudagraph``: the GPU's time, as
the decode step's graph runs the pair), medians; SDPA's flash backend on the same K/V laid
out contiguously beside them; "of copy": K and V bytes per second against a 2 GiB copy.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from benchmarks.jit_common import load  # noqa: E402

DECODE = ROOT / "recipes" / "decode"
ref = load(DECODE, "reference")
pa = load(DECODE, "paged_attention")
HQ, HKV, D, BLOCK = 32, 8, 128, 16
SHAPES = [(1, 32768), (2, 32768), (16, 4096), (8, 32768), (16, 32768)]


def graph_us(fn: Any) -> float:
    fn()
    torch.cuda.synchronize()
    return 1e3 * float(triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median"))


def copy_gbs() -> float:
    """GB/s of a 2 GiB device-to-device copy (read plus written), timed with do_bench as
    benchmarks/decode_jit_check.py does (a graph replay of it measured 2774 GB/s, well
    under the 4246 the other benchmarks measure: not a usable reference)."""
    src = torch.empty(1 << 30, dtype=torch.float16, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    ms = float(triton.testing.do_bench(lambda: dst.copy_(src), return_mode="median"))
    return 2 * src.numel() * 2 / (ms * 1e-3) / 1e9


def configs(splits: tuple[int, ...] = (32, 64)) -> list[dict[str, int]]:
    return [dict(num_splits=s, min_split=m, block_n=b, num_warps=w, num_stages=st)
            for s, m, b, w, st in itertools.product(splits, (128, 256, 512), (64, 128),
                                                    (4, 8), (2, 3, 4))]  # fmt: skip


@dataclass(frozen=True)
class Problem:
    """One decode shape's data: the queries, the paged K/V cache, flash's answer and time."""

    q: Any
    k_cache: Any
    v_cache: Any
    table: Any
    lens: Any
    scale: float
    expected: Any  # flash's output, fp32, shaped as q
    flash_us: float  # SDPA's flash backend on the same K/V laid out contiguously
    kv_bytes: int


def decode_problem(seqs: int, ctx: int) -> Problem:
    """Random data for ``seqs`` sequences of ``ctx`` tokens (seeded by the shape), block
    tables shuffled, and flash's output and CUDA-graph time on it."""
    g = torch.Generator(device="cuda").manual_seed(seqs * 7 + ctx)
    q = torch.randn(seqs, HQ, D, generator=g, device="cuda").half()
    k, v = (torch.randn(seqs, HKV, ctx, D, generator=g, device="cuda").half() for _ in range(2))
    kc, vc, table = ref.paged_from_contiguous(k, v, BLOCK)
    lens = torch.full((seqs,), ctx, dtype=torch.int32, device="cuda")
    scale = 1.0 / math.sqrt(D)
    qg = q.reshape(seqs, HKV, HQ // HKV, D)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        expected = torch.nn.functional.scaled_dot_product_attention(qg, k, v, scale=scale)
        flash = graph_us(lambda: torch.nn.functional.scaled_dot_product_attention(
            qg, k, v, scale=scale))  # fmt: skip
    return Problem(q, kc, vc, table, lens, scale, expected.reshape(q.shape).float(), flash,
                   2 * seqs * ctx * HKV * D * 2)  # fmt: skip


def modes_main(doc: str, modes: tuple[str, ...], shapes: list[tuple[int, int]],
               probe_shape: Any, cfg_format: str) -> int:  # fmt: skip
    """The command line of a probe that runs the pair several ways (``modes``) at several
    shapes: ``probe_shape(seqs, ctx, copy, modes)`` returns a shape's rows and each mode's
    best; prints the table (configs as ``cfg_format``), and writes --json."""
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--modes", default=",".join(modes), help="comma-separated, of: " + ", ".join(modes)
    )
    ap.add_argument("--shapes", default=",".join(f"{s}x{c}" for s, c in shapes))
    args = ap.parse_args()
    chosen = args.modes.split(",")
    if unknown := set(chosen) - set(modes):
        ap.error(f"unknown mode(s) {sorted(unknown)}; choose from {', '.join(modes)}")
    copy = copy_gbs()
    results = []
    for shape in args.shapes.split(","):
        seqs, ctx = (int(v) for v in shape.split("x"))
        results.append(probe_shape(seqs, ctx, copy, chosen))
        print(f"[probe] {shape} done", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy, "shapes": results}, indent=1))
    print(f"copy: {copy:.0f} GB/s; CUDA-graph medians, µs; best config per mode")
    width = 2 + max(len(cfg_format.format(**b)) for r in results for b in r["best"].values())
    print(f"seqs context  flash  mode          {'config':{width}}    µs  flash/ours  of copy"
          "  max error")  # fmt: skip
    for r in results:
        for mode, b in r["best"].items():
            print(f"{r['seqs']:4} {r['context']:7} {r['flash_us']:6.1f}  {mode:12}  "
                  f"{cfg_format.format(**b):{width}}{b['us']:6.1f}  "
                  f"{r['flash_us'] / b['us']:9.2f}x  {100 * b['of_copy']:6.0f}%  "
                  f"{b['max_error']:.1e}")  # fmt: skip
    return 0


def time_modes(seqs: int, ctx: int, copy: float, modes: list[str],
               configs: Callable[[str], list[dict[str, Any]]], launcher: Callable[..., Any],
               checked: Callable[[str], bool],
               read_bytes: Callable[[str, dict[str, Any], int], int] | None = None,
               ) -> dict[str, Any]:  # fmt: skip
    """A probe's shape: each mode's ``configs(mode)`` run by ``launcher(mode, problem, out,
    scratch, cfg)`` (a callable that launches), timed as CUDA-graph replays; the output
    checked against flash where ``checked(mode)``; "of copy" from ``read_bytes(mode, cfg,
    kv_bytes)`` (default: K and V once). Prints each mode's best as it goes."""
    p = decode_problem(seqs, ctx)
    rows = []
    for mode in modes:
        for cfg in configs(mode):
            scratch = pa.split_scratch(seqs, HQ, cfg.get("splits", 32), D, p.q)
            out = torch.full_like(p.q, float("nan"))
            try:
                us = graph_us(launcher(mode, p, out, scratch, cfg))
            except Exception as exc:  # a config that does not compile or launch
                print(f"  {mode} {cfg}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
                continue
            err = float((out.float() - p.expected).abs().max()) if checked(mode) else 0.0
            read = read_bytes(mode, cfg, p.kv_bytes) if read_bytes else p.kv_bytes
            label = " ".join(f"{k}={v}" for k, v in cfg.items())
            rows.append({**cfg, "cfg": label, "mode": mode, "us": us, "max_error": err,
                         "of_copy": read / (us * 1e-6) / 1e9 / copy})  # fmt: skip
    best = {m: min((r for r in rows if r["mode"] == m), key=lambda r: r["us"]) for m in modes}
    for m, b in best.items():  # as it goes, in case a later shape fails
        print(f"  {seqs}x{ctx} {m}: {b['us']:.1f} us, {100 * b['of_copy']:.0f}% of copy, "
              f"{b['cfg']}", file=sys.stderr, flush=True)  # fmt: skip
    return {"seqs": seqs, "context": ctx, "flash_us": p.flash_us, "best": best, "rows": rows}


def probe(seqs: int, ctx: int, copy: float, splits: tuple[int, ...]) -> dict[str, Any]:
    p = decode_problem(seqs, ctx)
    q, kc, vc, table, lens, scale = p.q, p.k_cache, p.v_cache, p.table, p.lens, p.scale
    expected, flash, kv_bytes = p.expected, p.flash_us, p.kv_bytes
    out = torch.empty_like(q)
    rows = []
    for cfg in configs(splits):
        scratch = pa.split_scratch(seqs, HQ, cfg["num_splits"], D, q)

        def run(cfg: dict[str, int] = cfg, scratch: Any = scratch) -> None:
            pa.paged_attention(q, kc, vc, table, lens, out, scale, scratch=scratch, **cfg)

        try:
            us = graph_us(run)
        except Exception as exc:  # a config that does not compile or launch
            print(f"  {cfg}: {type(exc).__name__}", file=sys.stderr)
            continue
        err = float((out.float() - expected).abs().max())
        rows.append({**cfg, "us": us, "of_copy": kv_bytes / (us * 1e-6) / 1e9 / copy,
                     "max_error": err})  # fmt: skip
    best = {f"{s} ranges": min((r for r in rows if r["num_splits"] == s), key=lambda r: r["us"])
            for s in splits}  # fmt: skip
    return {"seqs": seqs, "context": ctx, "flash_us": flash, "best": best, "rows": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--splits", default="32,64", help="ranges per sequence of the pair")
    args = ap.parse_args()
    splits = tuple(int(s) for s in args.splits.split(","))
    copy = copy_gbs()
    results = [probe(s, c, copy, splits) for s, c in SHAPES]
    if args.json:
        args.json.write_text(json.dumps({"copy_gbs": copy, "shapes": results}, indent=1))
    print(f"copy: {copy:.0f} GB/s; CUDA-graph medians, µs; flash / ours (above 1: ours faster)")
    head = "seqs context  flash  kernel          best config"
    print(f"{head:<67}µs  flash/ours  of copy")
    for r in results:
        for s, b in r["best"].items():
            cfg = "min {min_split} block_n {block_n} w{num_warps} s{num_stages}".format(**b)
            ratio = r["flash_us"] / b["us"]
            print(
                f"{r['seqs']:4} {r['context']:7} {r['flash_us']:6.1f}  {s:14}  {cfg:30} "
                f"{b['us']:6.1f}  {ratio:9.2f}x  {100 * b['of_copy']:6.0f}%  "
                f"(max error {b['max_error']:.1e})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
