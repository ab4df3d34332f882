"""Probe: the bmm_chunk bundle ran 0.78x mamba's own wrapper at batch 2 x 16384 tokens (bf16),
while at batch 1 its tuned config beat all nine of mamba's configs. This times, at batch 1
and 2 x 16384, each of mamba's configs through Triton's JIT, the bundle's kernel, and
mamba's wrapper (its autotuner keyed on chunk_size, K and IS_CAUSAL only, so it tunes at
its first call), on the GPU alone (CUDA-graph replays) and per call (do_bench).

    PYTHONPATH=<mamba_ssm's folder>:<this folder> python probe_batch.py BUNDLE [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import triton
import triton.language as tl
from calls import bmm_inputs
from mamba_ssm.ops.triton.ssd_bmm import _bmm_chunk_fwd, _bmm_chunk_fwd_kernel

import loader


def _author_configs() -> list[triton.Config]:
    return list(_bmm_chunk_fwd_kernel.configs)


def _launch(cfg: triton.Config, args: list) -> functools.partial:  # type: ignore[type-arg]
    a, b, out, _, seqlen, cs, k, g, *strides = args
    meta = cfg.kwargs
    grid = (triton.cdiv(cs, meta["BLOCK_SIZE_M"]) * triton.cdiv(cs, meta["BLOCK_SIZE_N"]),
            a.shape[0], out.shape[1] * g)  # fmt: skip
    launch = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages, **meta}
    return functools.partial(_bmm_chunk_fwd_kernel.fn[grid], a, b, out, None, seqlen, cs, k, g,
                             *strides[:13], 0, 0, False, tl.bfloat16, HAS_SEQ_IDX=False,
                             **launch)  # fmt: skip


def _label(meta: dict, warps: int, stages: int) -> str:  # type: ignore[type-arg]
    return (f"{meta['BLOCK_SIZE_M']}x{meta['BLOCK_SIZE_N']}x{meta['BLOCK_SIZE_K']} "
            f"w{warps} s{stages}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("--json")
    args_ = ap.parse_args()
    kernel = loader.open(args_.bundle)["bmm_chunk_fwd"]
    gpu = functools.partial(triton.testing.do_bench_cudagraph, return_mode="median")
    call = functools.partial(triton.testing.do_bench, return_mode="median")
    rows = []
    for batch in (1, 2):
        sizes = {"batch": batch, "seqlen": 16384, "ngroups": 1, "K": 128, "chunk_size": 256}
        args = bmm_inputs(sizes, {"T": "bf16"})
        args[3] = None
        want = _bmm_chunk_fwd(args[0], args[1], 256)  # mamba's autotuner tunes here, once
        picked = _bmm_chunk_fwd_kernel.best_config
        ours = functools.partial(kernel, *args)
        v = kernel.variant_for(*args)
        fns = {f"bundle {_label(v.meta, v.num_warps, v.num_stages)}": ours}
        for cfg in _author_configs():
            fns[f"mamba {_label(cfg.kwargs, cfg.num_warps, cfg.num_stages)}"] = _launch(cfg, args)
        for name, fn in fns.items():
            args[2].fill_(float("nan"))
            fn()
            err = float((args[2].float() - want.float()).abs().max())
            rows.append({"batch": batch, "what": name, "gpu_us": gpu(fn) * 1e3,
                         "call_us": call(fn) * 1e3, "err": err})  # fmt: skip
        wrapper = functools.partial(_bmm_chunk_fwd, args[0], args[1], 256)
        chose = _label(picked.kwargs, picked.num_warps, picked.num_stages)
        what = f"mamba's wrapper (picked {chose})"
        rows.append({"batch": batch, "what": what, "gpu_us": gpu(wrapper) * 1e3,
                     "call_us": call(wrapper) * 1e3, "err": 0.0})  # fmt: skip
        print(f"\nbf16, batch {batch} x 16384 tokens: µs, on the GPU alone (graph) and per call")
        for r in sorted((r for r in rows if r["batch"] == batch), key=lambda r: r["gpu_us"]):
            print(f"  {r['what']:<44} {r['gpu_us']:8.1f} {r['call_us']:8.1f}  err {r['err']:.2g}")
        sys.stdout.flush()
    if args_.json:
        Path(args_.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
