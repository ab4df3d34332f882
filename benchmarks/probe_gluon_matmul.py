"""Probe: does a warp-specialised Gluon matmul (recipes/hopper/matmul_gluon.py: one warp
loads a deep ring of TMA stages, a warp group multiplies) close the gap to cuBLAS
at M = 64 that splitk_matmul.py's software pipeline leaves (0.89-0.95x, issue 21), and
does splitting K over more CTAs (matmul_ws_splitk, here) help it?

Times, through Triton's JIT and interleaved, cuBLAS, the split-K kernel at the bundle's
pick for M = 64 and 128 and matmul_ws(_splitk) over tile widths, K steps, splits and
stages, N = K = 4096. Each output is checked against an fp32 product first:

    python benchmarks/probe_gluon_matmul.py [--ms 64,128] [--dtypes fp16,bf16] [--json out.json]

"cuBLAS / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from benchmarks.hopper_bench import interleaved
from benchmarks.probe_splitk import SMEM, descriptors, hopper_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes" / "hopper"))
from matmul_gluon import _multiply  # the recipe's warp group, for the split form


@gluon.jit
def _load_range(a_desc, b_desc, a_smem, b_smem, ready, free, off_m, off_n, k_lo, k_steps,
                STAGES: gl.constexpr):  # fmt: skip
    # matmul_gluon.py's _load from K step k_lo on.
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    for k in range(k_steps):
        slot = k % STAGES
        mbarrier.wait(free.index(slot), ((k // STAGES) + 1) & 1, pred=k >= STAGES)
        mbarrier.expect(ready.index(slot), nbytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, (k_lo + k) * BLOCK_K],
                                        ready.index(slot), a_smem.index(slot))  # fmt: skip
        tma.async_copy_global_to_shared(b_desc, [(k_lo + k) * BLOCK_K, off_n],
                                        ready.index(slot), b_smem.index(slot))  # fmt: skip


@gluon.jit
def matmul_ws_splitk(a_desc, b_desc, c_desc, ws_ptr, locks_ptr, M, N, K,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                     STAGES: gl.constexpr, SPLIT_K: gl.constexpr):  # fmt: skip
    # matmul_ws with K split over SPLIT_K CTAs a tile, reduced as splitk_matmul.py does:
    # the last to arrive at the tile's lock adds the fp32 partials and stores C.
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_tiles = num_pid_m * gl.cdiv(N, BLOCK_N)
    tile_id = gl.program_id(0) % num_tiles
    split = gl.program_id(0) // num_tiles
    off_m = (tile_id % num_pid_m) * BLOCK_M
    off_n = (tile_id // num_pid_m) * BLOCK_N
    k_all = gl.cdiv(K, BLOCK_K)
    per = gl.cdiv(k_all, SPLIT_K)
    k_lo = split * per
    k_steps = gl.minimum(k_lo + per, k_all) - k_lo
    dtype: gl.constexpr = a_desc.dtype
    a_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    free = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(free.index(i), count=1)
    fence_async_shared()
    acc = gl.warp_specialize(
        [(_multiply, (a_smem, b_smem, ready, free, k_steps, BLOCK_M, BLOCK_N, STAGES)),
         (_load_range, (a_desc, b_desc, a_smem, b_smem, ready, free, off_m, off_n, k_lo,
                        k_steps, STAGES))],
        [1], [24])[0]  # fmt: skip
    layout: gl.constexpr = acc.type.layout
    rows = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    cells = gl.expand_dims(rows, 1) * BLOCK_N + gl.expand_dims(cols, 0)
    tile: gl.constexpr = BLOCK_M * BLOCK_N
    partials = ws_ptr + tile_id.to(gl.int64) * (SPLIT_K * tile)
    gl.store(partials + split * tile + cells, acc)
    gl.thread_barrier()
    arrived = gl.atomic_add(locks_ptr + tile_id, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout)
        for s in gl.static_range(SPLIT_K):
            total += gl.load(partials + s * tile + cells, cache_modifier=".cg")
        c_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
        c_smem.store(total.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
        tma.store_wait(0)
        gl.atomic_xchg(locks_ptr + tile_id, 0)


# the split-K kernel's bundle picks at M = 64 and 128 (benchmarks/RESULTS.md)
SPLITK = [{"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4,
           "num_stages": 8},
          {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4,
           "num_stages": 6}]  # fmt: skip


# matmul_ws_splitk's (BLOCK_N, BLOCK_K, SPLIT_K): 128 or 256 CTAs at M = 64
SPLITS = [(64, 64, 1), (32, 128, 1), (64, 64, 2), (64, 128, 2), (32, 64, 2), (32, 128, 2),
          (128, 64, 4), (128, 128, 4), (64, 64, 4)]  # fmt: skip


def gluon_configs() -> list[dict[str, int]]:
    """matmul_ws_splitk's configs: each tile shape and split at 8 stages and the most that
    fit in shared memory (SPLIT_K = 1: matmul_ws). (The first probe of record timed
    matmul_ws alone and a two-consumer form, since removed: its data README says so.)"""
    out = []
    for bn, bk, split in SPLITS:
        most = (SMEM - 64 * bn * 2) // ((64 * bk + bk * bn) * 2)
        for stages in sorted({8, most} - {s for s in (8,) if s > most}):
            out.append({"BLOCK_M": 64, "BLOCK_N": bn, "BLOCK_K": bk, "STAGES": stages,
                        "SPLIT_K": split})  # fmt: skip
    return out


def _label(cfg: dict[str, int]) -> str:
    if "STAGES" in cfg:
        return (f"ws 64x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} split {cfg['SPLIT_K']} "
                f"s{cfg['STAGES']}")  # fmt: skip
    return f"splitk 64x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} s{cfg['num_stages']}"


def _gluon_run(a: Any, b: Any, c: Any, cfg: dict[str, int], ws: Any, locks: Any) -> Any:
    import torch
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    dt = gl.float16 if a.dtype == torch.float16 else gl.bfloat16

    def desc(t: Any, block: list[int]) -> Any:
        layout = gl.NVMMASharedLayout.get_default_for(block, dt)
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)

    m, k = a.shape
    n = b.shape[1]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    descs = (desc(a, [bm, bk]), desc(b, [bk, bn]), desc(c, [bm, bn]))
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn) * cfg["SPLIT_K"],)
    if cfg["SPLIT_K"] == 1:
        kernel = hopper_module("matmul_gluon").matmul_ws
        kw = {k: v for k, v in cfg.items() if k != "SPLIT_K"}
        return functools.partial(kernel[grid], *descs, m, n, k, num_warps=4, **kw)
    return functools.partial(matmul_ws_splitk[grid], *descs, ws, locks, m, n, k, num_warps=4,
                             **cfg)  # fmt: skip


def measure(name: str, m: int, rounds: int) -> dict[str, Any]:
    import torch
    import triton

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[name]
    n = k = 4096
    a = torch.randn(m, k, device="cuda", dtype=dt)
    b = torch.randn(k, n, device="cuda", dtype=dt) / k**0.5
    ref = a.float() @ b.float()
    fns: dict[str, Any] = {}
    errors: dict[str, float] = {}
    outs: dict[str, Any] = {}
    splitk = hopper_module("splitk_matmul").matmul_tma_splitk
    for cfg in SPLITK + gluon_configs():
        c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        ws = torch.empty(m * n * 4, device="cuda", dtype=torch.float32)
        locks = torch.zeros(m * n // 64, device="cuda", dtype=torch.int32)
        if "STAGES" in cfg:
            run = _gluon_run(a, b, c, cfg, ws, locks)
        else:
            grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
            run = functools.partial(splitk[grid], *descriptors(a, b, c, cfg), ws, locks, m, n,
                                    k, GROUP_M=8, **cfg)  # fmt: skip
        try:
            run()
            torch.cuda.synchronize()
        except Exception as exc:  # out of resources: not a candidate
            print(f"[probe] {_label(cfg)}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)
            continue
        run()  # twice: the locks must have come back to zero
        torch.cuda.synchronize()
        errors[_label(cfg)] = float((c.float() - ref).abs().max())
        if locks.any():
            errors[_label(cfg)] = float("inf")
        fns[_label(cfg)], outs[_label(cfg)] = run, c
    cout = torch.empty(m, n, device="cuda", dtype=dt)
    fns["cuBLAS"] = functools.partial(torch.mm, a, b, out=cout)
    times = {key: statistics.median(t) for key, t in interleaved(fns, rounds).items()}
    print(f"[probe] {name} M={m} done", file=sys.stderr, flush=True)
    rows = [{"kernel": key, "us": us, "ratio": times["cuBLAS"] / us, "max_err": errors.get(key)}
            for key, us in sorted(times.items(), key=lambda kv: kv[1])]  # fmt: skip
    return {"dtype": name, "M": m, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="64,128")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = [measure(name, int(m), args.rounds)
               for name in args.dtypes.split(",") for m in args.ms.split(",")]  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"\n{r['dtype']} M={r['M']} (cuBLAS / kernel)")
        for row in r["rows"][: args.top]:
            err = "" if row["max_err"] is None else f"  max err {row['max_err']:.3f}"
            print(f"  {row['kernel']:28} {row['us']:6.1f} us  {row['ratio']:.3f}{err}")


if __name__ == "__main__":
    main()
