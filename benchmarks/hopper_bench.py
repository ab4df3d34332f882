"""Hopper kernels from a bundle against the strongest alternatives, in one run (issue 21).

- matmul: the bundle's ``matmul`` op (per bucket, the split-K, the persistent TMA or the
  warp-specialised Gluon matmul, whichever the build measured fastest; each tuned per
  bucket) against cuBLAS
  (``torch.mm`` into a preallocated output), fp16 and bf16, N = K = 4096; the persistent
  kernel alone beside it;
- attention forward: the bundle's ``attention_fwd_*`` ops (per bucket, the Triton or the
  Gluon kernel, whichever the build measured faster) against PyTorch's best
  ``scaled_dot_product_attention`` backend at each shape (flash, cuDNN and efficient are
  each timed; the fastest counts), fp16, head dim 64 and 128, causal and not;
- host cost per call: a descriptor kernel's call against a plain-pointer kernel's call
  (the same product with in-kernel descriptors), each piece timed on the host alone.

Ratios are the baseline's time over ours: above 1, the bundle is faster. The functions
compared at a shape are timed in interleaved rounds, the order rotating each round (each
round a median of triton.testing.do_bench, L2 flushed between runs); a time is the median
of its rounds. Timed one after the other, the second ran on a GPU its predecessor had
heated, up to 6% slower for the same code (benchmarks/RESULTS.md, issue 21).

    python benchmarks/hopper_bench.py --bundle hopper.aotc [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def bench(fn: Any) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")) * 1e3


def interleaved(
    fns: dict[str, Any], rounds: int = 5, within: dict[str, Any] | None = None
) -> dict[str, list[float]]:
    """µs of each function in each of ``rounds`` rounds; round ``i`` starts at function
    ``i`` (mod their number), so that no function always follows another. ``within``: a
    context a function is timed inside (an SDPA backend's), entered outside the timing."""
    keys = list(fns)
    out: dict[str, list[float]] = {k: [] for k in keys}
    for i in range(rounds):
        for key in keys[i % len(keys) :] + keys[: i % len(keys)]:
            with (within or {}).get(key, contextlib.nullcontext)():
                out[key].append(bench(fns[key]))
    return out


def _hopper_calls() -> Any:
    from aot.source import load_module

    return load_module(Path(__file__).resolve().parents[1] / "recipes" / "hopper" / "calls.py")


def matmul_rows(bundle: Any, ms: list[int]) -> list[dict[str, Any]]:
    """The ``matmul`` op (per bucket, split-K, the persistent or the warp-specialised kernel,
    whichever the build measured fastest) against cuBLAS; the persistent kernel alone
    beside it."""
    import torch

    rows = []
    op, persistent = bundle["matmul"], bundle["matmul_tma"]
    workspace = _hopper_calls().splitk_workspace
    split = bundle["matmul_tma_splitk"]
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for m in ms:
            n = k = 4096
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype) / k**0.5
            c = torch.empty(m, n, device="cuda", dtype=dtype)
            ws, locks = workspace(m, n, split.launch_config(dtypes={"T": name}, M=m))
            args = (a, b, c, ws, locks, m, n, k)
            times = interleaved({
                "ours": functools.partial(op, *args),
                "alone": functools.partial(persistent, a, b, c, m, n, k),
                "cublas": functools.partial(torch.mm, a, b, out=c),
            })  # fmt: skip
            ours, alone, ref = (statistics.median(times[k]) for k in ("ours", "alone", "cublas"))
            each = [r / o for r, o in zip(times["cublas"], times["ours"], strict=True)]
            routed = op.route(*args)[0]
            v = routed.variant_for(*(args if routed.name == split.name else (a, b, c, m, n, k)))
            config = {**v.meta, "warps": v.num_warps, "stages": v.num_stages}
            rows.append({"dtype": name, "M": m, "ours_us": ours, "cublas_us": ref,
                         "ratio": ref / ours, "tflops": 2 * m * n * k / ours / 1e6,
                         "ratio_rounds": [min(each), max(each)], "kernel": routed.name,
                         "persistent_us": alone, "config": config})  # fmt: skip
            print(f"[hopper_bench] matmul {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def sdpa_backends(q: Any, k: Any, v: Any, causal: bool) -> dict[str, Any]:
    """Each of PyTorch's SDPA backends that runs this shape: its name -> the context that
    selects it."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    found = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.EFFICIENT_ATTENTION):  # fmt: skip
        try:
            with sdpa_kernel(backend):
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except RuntimeError:
            continue
        found[backend.name] = functools.partial(sdpa_kernel, backend)
    return found


def attention_rows(bundle: Any, lengths: list[int], heads: int) -> list[dict[str, Any]]:
    import torch

    rows = []
    for d in (64, 128):
        for causal in (False, True):
            kernel = bundle[f"attention_fwd_d{d}" + ("_causal" if causal else "")]
            for n in lengths:
                z = max(1, 16384 // n) if n < 16384 else 1
                q, k, v = (torch.randn(z, heads, n, d, device="cuda", dtype=torch.float16)
                           for _ in range(3))  # fmt: skip
                o = torch.empty_like(q)
                flat = [t.view(z * heads * n, d) for t in (q, k, v, o)]
                sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention,
                                         q, k, v, is_causal=causal)  # fmt: skip
                backends = sdpa_backends(q, k, v, causal)
                call = (*flat, d**-0.5, z, heads, n)
                fns = {"ours": functools.partial(kernel, *call)}
                times = interleaved({**fns, **dict.fromkeys(backends, sdpa)}, 3, backends)
                ours = statistics.median(times.pop("ours"))
                ref, backend = min((statistics.median(t), name) for name, t in times.items())
                flops = 4 * z * heads * n * n * d / (2 if causal else 1)
                rows.append({"d": d, "causal": causal, "Z": z, "H": heads, "N": n,
                             "kernel": kernel.route(*call)[0].name, "ours_us": ours,
                             "sdpa_us": ref, "backend": backend,
                             "ratio": ref / ours, "tflops": flops / ours / 1e6})  # fmt: skip
                print(f"[hopper_bench] attention {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def _per_call(fns: dict[str, Any], rounds: int = 15, n: int = 4000) -> dict[str, float]:
    """Median µs per call of each function, timed in interleaved rounds (so that a clock
    or driver hiccup falls on every function alike, not on whichever ran then)."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[key].append((time.perf_counter() - t0) / n * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def host_rows(bundle: Any) -> list[dict[str, Any]]:
    """Host time per call, descriptors against plain pointers, on small products (their
    GPU time is below the host's, so the loop measures the host)."""
    import torch

    m = n = k = 128
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    paths = {
        "descriptors (matmul_tma)": bundle["matmul_tma"].host_path(a, b, c, m, n, k),
        "plain pointers (matmul_tma_device)": bundle["matmul_tma_device"].host_path(
            a, b, c, m, n, k, a.stride(0), b.stride(0), c.stride(0)
        ),
    }
    rows: dict[str, dict[str, Any]] = {name: {"kernel": name} for name in paths}
    # driver_call: cuLaunchKernel as the loader makes it, the parameter buffer whole;
    # driver_call_params: the same launch with a pointer per parameter (kernelParams).
    for piece in ("call", "lookup", "pack_grid", "launch", "driver_call", "driver_call_params"):
        times = _per_call({name: getattr(hp, piece) for name, hp in paths.items()})
        torch.cuda.synchronize()
        for name, us in times.items():
            rows[name][piece + "_us"] = us
    for row in rows.values():
        print(f"[hopper_bench] host {row}", file=sys.stderr, flush=True)
    return list(rows.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--json")
    ap.add_argument("--ms", default="64,128,256,512,1024,2048,4096,8192")
    ap.add_argument("--lengths", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--only", default="matmul,attention,host")
    args = ap.parse_args()
    import torch

    import loader

    torch.cuda.init()  # type: ignore[no-untyped-call]
    bundle = loader.open(args.bundle)
    only = args.only.split(",")
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    if "host" in only:
        out["host"] = host_rows(bundle)
    if "matmul" in only:
        out["matmul"] = matmul_rows(bundle, [int(x) for x in args.ms.split(",")])
    if "attention" in only:
        out["attention"] = attention_rows(bundle, [int(x) for x in args.lengths.split(",")],
                                          args.heads)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"\n{out['gpu']}, torch {out['torch']}")
    for r in out.get("matmul", []):
        cfg = r["config"]
        # split-K's K split, or the persistent kernel's epilogue split in two halves
        split = f" split-K {cfg['SPLIT_K']}" if "SPLIT_K" in cfg else ""
        split += " epilogue in 2" if cfg.get("EPILOGUE_SPLIT", 1) == 2 else ""
        pick = (
            f"{r['kernel']} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']}"
            f"{split} w{cfg['warps']} s{cfg['stages']}"
        )
        print(f"matmul {r['dtype']:9} M={r['M']:5}  ours {r['ours_us']:8.1f} us  cuBLAS "
              f"{r['cublas_us']:8.1f} us  {r['ratio']:.2f}x ({r['ratio_rounds'][0]:.2f}-"
              f"{r['ratio_rounds'][1]:.2f})  persistent alone "
              f"{r['cublas_us'] / r['persistent_us']:.2f}x  ({pick})")  # fmt: skip
    for r in out.get("attention", []):
        print(f"attention d={r['d']:3} causal={r['causal']!s:5} {r['Z']}x{r['H']}x{r['N']:<6} "
              f"ours {r['ours_us']:8.1f} us  SDPA {r['sdpa_us']:8.1f} us ({r['backend']})  "
              f"{r['ratio']:.2f}x  ({r['tflops']:.0f} TFLOP/s)  {r['kernel']}")  # fmt: skip
    for r in out.get("host", []):
        print(f"host {r['kernel']:36} call {r['call_us']:.2f} us  lookup "
              f"{r['lookup_us']:.2f}  pack+grid {r['pack_grid_us']:.2f}  launch "
              f"{r['launch_us']:.2f}  driver: buffer whole {r['driver_call_us']:.2f}, a pointer "
              f"per parameter {r['driver_call_params_us']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
