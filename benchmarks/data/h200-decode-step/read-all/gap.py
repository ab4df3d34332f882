"""Why the bench's graph of the bundle's split-KV pair (1 x 32k) read 40.9 us and the probe's
graph of the JIT's pair 39.6: the same data, both launches, both statistics."""

import sys

sys.path.insert(0, ".")
import torch
import triton.testing as tt

import loader
from benchmarks.probe_split_kv import HQ, D, decode_problem, pa

p = decode_problem(1, 32768)
q, kc, vc, table, lens, scale = p.q, p.k_cache, p.v_cache, p.table, p.lens, p.scale
bundle = loader.open(sys.argv[1])
width = table.shape[1]
strides = [q.stride(0), q.stride(1), *kc.stride()[:3], *vc.stride()[:3], table.stride(0)]
out = torch.empty_like(q)
part = tuple(torch.empty(1, HQ, 32, *s, device="cuda") for s in ((D,), (), ()))


def b():
    bundle["paged_decode_split"](q, kc, vc, table, lens, *part, scale, 1, width, *strides)
    bundle["paged_decode_reduce"](*part, out, 1, out.stride(0), out.stride(1))


cfg = bundle["paged_decode_split"].launch_config(
    dtypes={"T": "fp16"}, num_seqs=1, max_blocks_per_seq=width
)
print("bundle split config", cfg)
scratch = pa.split_scratch(1, HQ, 32, D, q)


def j():
    pa.paged_attention(
        q,
        kc,
        vc,
        table,
        lens,
        out,
        scale,
        block_n=cfg["BLOCK_N"],
        num_splits=32,
        scratch=scratch,
        num_warps=cfg.get("num_warps", 4),
        num_stages=cfg.get("num_stages", 2),
        min_split=cfg["MIN_SPLIT"],
        read_all=True,
    )


def j1():
    pa.paged_attention(
        q,
        kc,
        vc,
        table,
        lens,
        out,
        scale,
        block_n=cfg["BLOCK_N"],
        num_splits=32,
        scratch=scratch,
        num_warps=1,
        num_stages=cfg.get("num_stages", 2),
        min_split=cfg["MIN_SPLIT"],
        read_all=True,
    )


for name, fn in (
    ("bundle pair", b),
    ("JIT pair (reduce warps as split)", j),
    ("JIT pair, reduce 1 warp", j1),
):
    fn()
    torch.cuda.synchronize()
    err = float((out.float() - p.expected).abs().max())
    for _ in range(2):
        m20 = 1e3 * tt.do_bench_cudagraph(fn, rep=20)
        md50 = 1e3 * tt.do_bench_cudagraph(fn, rep=50, return_mode="median")
        of_copy = p.kv_bytes / (md50 * 1e-6) / 1e9 / 4245
        print(
            f"{name:34} mean rep20 {m20:6.2f} us   median rep50 {md50:6.2f} us   "
            f"of copy (4245) {of_copy:.1%}  err {err:.1e}",
            flush=True,
        )
