"""Probe: at M >= 1024 the shipped matmuls read 0.93-0.98x cuBLAS on the H200 (issue 21;
goal 0.98x). cuBLAS runs warp-specialised producer/consumer kernels there. This times,
through Triton's JIT, forms of the persistent TMA matmul the recipe does not ship yet,
beside the recipe's own persistent kernel and cuBLAS, interleaved:

- ``host``: recipes/hopper/tma_matmul.py's ``matmul_tma_persistent`` (host descriptors),
  the configs the bundle ships at these sizes and wider tiles;
- ``device``: the same file's ``matmul_tma_device`` (descriptors made in the kernel, global
  scratch from ``triton.set_allocator``), with Triton's warp specialisation at 128-row
  tiles, which only in-kernel descriptors allow in Triton 3.6;
- ``subtile``: the same host-descriptor kernel with ``EPILOGUE_SPLIT=2``, C stored in two
  halves of [BLOCK_M, BLOCK_N / 2] (half the epilogue's shared memory, so deeper pipelines
  fit at 128x256). The recorded run (benchmarks/data/h200-hopper/probe-large/) timed a
  copy of this form written in the probe, before the recipe's kernel took it.

    python benchmarks/probe_matmul_large.py [--ms 1024,2048,4096,8192] [--json out.json]

Medians of triton.testing.do_bench (L2 flushed) over interleaved rounds, N = K = 4096;
"cuBLAS / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton

from benchmarks.probe_splitk import hopper_module

# (form, BLOCK_M, BLOCK_N, BLOCK_K, warp specialise, num_warps, num_stages)
CONFIGS = [
    ("host", 128, 128, 64, 0, 4, 4),
    ("host", 128, 128, 64, 0, 4, 5),
    ("host", 128, 256, 64, 0, 8, 3),
    ("device", 128, 128, 64, 0, 4, 5),
    ("device", 128, 128, 64, 1, 4, 3),
    ("device", 128, 128, 64, 1, 4, 4),
    ("device", 128, 128, 64, 1, 4, 5),
    ("device", 128, 256, 64, 1, 4, 3),
    ("device", 128, 256, 64, 1, 4, 4),
    ("device", 128, 256, 64, 0, 8, 3),
    ("subtile", 128, 256, 64, 0, 8, 3),
    ("subtile", 128, 256, 64, 0, 8, 4),
    ("subtile", 128, 128, 64, 0, 4, 5),
    ("subtile", 128, 128, 64, 0, 4, 6),
]


def _runner(cfg: tuple, a, b, c, num_sms: int):
    from triton.tools.tensor_descriptor import TensorDescriptor

    form, bm, bn, bk, ws, warps, stages = cfg
    m, k = a.shape
    n = b.shape[1]
    grid = (min(num_sms, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
    meta = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
            "num_warps": warps, "num_stages": stages}  # fmt: skip
    da, db = TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn])
    tma = hopper_module("tma_matmul")
    if form == "host":
        dc = TensorDescriptor.from_tensor(c, [bm, bn])
        return functools.partial(tma.matmul_tma_persistent[grid], da, db, dc, m, n, k,
                                 WARP_SPECIALIZE=bool(ws), **meta)  # fmt: skip
    if form == "device":
        strides = (a.stride(0), b.stride(0), c.stride(0))
        return functools.partial(tma.matmul_tma_device[grid], a, b, c, m, n, k, *strides,
                                 WARP_SPECIALIZE=bool(ws), **meta)  # fmt: skip
    dc = TensorDescriptor.from_tensor(c, [bm, bn // 2])
    return functools.partial(tma.matmul_tma_persistent[grid], da, db, dc, m, n, k,
                             WARP_SPECIALIZE=False, EPILOGUE_SPLIT=2, **meta)  # fmt: skip


def bench(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) * 1e3


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ms", default="1024,2048,4096,8192")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                 device="cuda"))  # fmt: skip
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = []
    for name in args.dtypes.split(","):
        dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[name]
        for m in (int(v) for v in args.ms.split(",")):
            n = k = 4096
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(k, n, device="cuda", dtype=dt) / k**0.5
            c = torch.empty(m, n, device="cuda", dtype=dt)
            ref = a.float() @ b.float()
            fns = {"cublas": functools.partial(torch.mm, a, b, out=c)}
            errs = {}
            for cfg in CONFIGS:
                label = "{}-{}x{}x{}-ws{}-w{}-s{}".format(*cfg)
                try:
                    run = _runner(cfg, a, b, c, num_sms)
                    c.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                except Exception as exc:  # does not compile, or out of resources
                    print(f"[probe] {label}: {type(exc).__name__}: {str(exc)[:160]}",
                          file=sys.stderr)  # fmt: skip
                    continue
                errs[label] = float((c.float() - ref).abs().max())
                fns[label] = run
            times: dict[str, list[float]] = {key: [] for key in fns}
            keys = list(fns)
            for i in range(args.rounds):
                for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
                    times[key].append(bench(fns[key]))
            cublas = statistics.median(times.pop("cublas"))
            rows = sorted(({"cfg": key, "us": statistics.median(t), "err": errs[key]}
                           for key, t in times.items()), key=lambda r: r["us"])  # fmt: skip
            results.append({"dtype": name, "M": m, "cublas_us": cublas, "rows": rows})
            print(f"\n{name} M={m}: cuBLAS {cublas:.1f} us")
            for r in rows:
                print(f"  {r['cfg']:<32} {r['us']:8.1f} us  {cublas / r['us']:.3f}x  "
                      f"err {r['err']:.3g}")  # fmt: skip
            sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
