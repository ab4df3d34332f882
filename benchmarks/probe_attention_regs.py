"""Probe: the attention forward reads 0.79-0.99x cuDNN on the H200 (issue 21). Does a
register cap that fits two CTAs of 8 warps on an SM close it?

Compiled for sm_90 (on the CPU, ``cuobjdump -res-usage``), recipes/hopper/attention.py's
``attn_fwd`` at BLOCK_M=128, BLOCK_N=64, 8 warps takes 138 registers a thread at head dim
128 (one CTA of 8 warps per SM: 256 x 138 > 65536 / 2) and 124 with ``maxnreg=128``, no
spills, so two CTAs fit (16 warps, four warp groups, each able to run its softmax while
another's wgmma runs). The tuned picks run 8 warps per SM. This times, through Triton's
JIT, the bundle's picks beside capped configs and PyTorch's best SDPA backend, interleaved,
fp16, Z * N = 16384 and 32 heads as benchmarks/hopper_bench.py does:

    python benchmarks/probe_attention_regs.py [--lengths 1024,4096,16384] [--json out.json]
        [--dtypes fp16,bf16] [--x2]

Run 2 (the default configs) also times a key loop with lazy rescaling; run 3 (``--x2``) one
whose exponentials are computed two at a time in 16 bits (both below, through
``attn_fwd_variant``; the runs launched each from its own copy of that function).

"cuDNN / x" above 1 means x is faster. Each output is checked against SDPA's first.
Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.hopper_bench import interleaved, sdpa_backends
from benchmarks.probe_splitk import hopper_module

DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
EX2_X2 = {torch.float16: "ex2.approx.f16x2 $0, $1;",
          torch.bfloat16: "ex2.approx.ftz.bf16x2 $0, $1;"}  # fmt: skip

# (head dim, causal) -> configs (BLOCK_M, BLOCK_N, num_warps, num_stages, maxnreg); the first
# of each list is the bundle's pick at 4096-16384 (benchmarks/data/h200-hopper/epilogue-split/).
CONFIGS = {
    (128, False): [(128, 64, 4, 2, None), (128, 64, 4, 2, None, "lazy"),
                   (128, 64, 8, 2, 128), (128, 64, 8, 2, 128, "lazy")],
    (128, True): [(128, 64, 4, 2, None), (128, 64, 4, 2, None, "lazy"), (64, 64, 4, 3, None),
                  (64, 64, 4, 3, None, "lazy"), (128, 64, 8, 2, 128),
                  (128, 64, 8, 2, 128, "lazy")],
    (64, False): [(128, 128, 4, 3, None), (128, 128, 4, 3, None, "lazy"),
                  (128, 128, 8, 3, 128), (128, 128, 8, 3, 128, "lazy")],
    (64, True): [(64, 64, 4, 3, None), (64, 64, 4, 3, None, "lazy"), (128, 64, 8, 3, 128),
                 (128, 64, 8, 3, 128, "lazy")],
}  # fmt: skip
# --x2 (run 3): the picks beside the same configs with packed 16-bit exponentials
CONFIGS_X2 = {
    (128, False): [(128, 64, 4, 2, None), (128, 64, 4, 2, None, "x2")],
    (128, True): [(128, 64, 4, 2, None), (128, 64, 4, 2, None, "x2"), (64, 64, 4, 3, None),
                  (64, 64, 4, 3, None, "x2")],
    (64, False): [(128, 128, 8, 3, 128), (128, 128, 8, 3, 128, "x2")],
    (64, True): [(64, 64, 4, 3, None), (64, 64, 4, 3, None, "x2")],
}  # fmt: skip


@functools.cache
def _modules() -> tuple:
    return hopper_module("reference"), hopper_module("attention")


def _runner(cfg: tuple, q, k, v, o, causal: bool):
    ref, attn = _modules()
    bm, bn, warps, stages, cap, *form = cfg
    z, h, n, d = q.shape
    descs = ref.attention_descriptors(q, k, v, o, bm, bn)
    meta = {"HEAD_DIM": d, "BLOCK_M": bm, "BLOCK_N": bn, "CAUSAL": causal,
            "num_warps": warps, "num_stages": stages}  # fmt: skip
    if cap is not None:
        meta["maxnreg"] = cap
    grid = ref.attention_grid(z, h, n, bm)
    if form:  # the probe's own key loops (below)
        return functools.partial(attn_fwd_variant[grid], *descs, d**-0.5, z, h, n, FORM=form[0],
                                 ASM=EX2_X2[q.dtype], **meta)  # fmt: skip
    return functools.partial(attn.attn_fwd[grid], *descs, d**-0.5, z, h, n,
                             WARP_SPECIALIZE=False, **meta)  # fmt: skip


def _label(cfg: tuple) -> str:
    bm, bn, warps, stages, cap, *form = cfg
    return (
        f"{bm}x{bn}-w{warps}-s{stages}"
        + (f"-cap{cap}" if cap else "")
        + "".join(f"-{f}" for f in form)
    )


def probe(d: int, causal: bool, n: int, rounds: int, dtype: str, configs: dict,
          runner=_runner, label=_label) -> dict:  # fmt: skip
    """Each config of ``configs[(d, causal)]`` (launched by ``runner``, named by ``label``)
    and PyTorch's SDPA backends at one shape, checked against SDPA and timed interleaved."""
    z, heads = max(1, 16384 // n), 32
    q, k, v = (torch.randn(z, heads, n, d, device="cuda", dtype=getattr(torch, DTYPES[dtype]))
               for _ in range(3))  # fmt: skip
    o = torch.empty_like(q)
    sdpa = functools.partial(torch.nn.functional.scaled_dot_product_attention, q, k, v,
                             is_causal=causal)  # fmt: skip
    backends = sdpa_backends(q, k, v, causal)
    expected = sdpa().float()
    fns, errs = {}, {}
    for cfg in configs[(d, causal)]:
        name = label(cfg)
        try:
            run = runner(cfg, q, k, v, o, causal)
            o.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
        except Exception as exc:  # does not compile, or out of resources
            print(f"[probe] {name}: {type(exc).__name__}: {str(exc)[:160]}", file=sys.stderr)
            continue
        errs[name] = float((o.float() - expected).abs().max())
        fns[name] = run
    times = interleaved({**fns, **dict.fromkeys(backends, sdpa)}, rounds, backends)
    ref_us, backend = min((statistics.median(times.pop(name)), name) for name in backends)
    flops = 4 * z * heads * n * n * d / (2 if causal else 1)
    rows = sorted(({"cfg": key, "us": statistics.median(t), "err": errs[key]}
                   for key, t in times.items()), key=lambda r: r["us"])  # fmt: skip
    print(f"\n{dtype} d={d} causal={causal} {z}x{heads}x{n}: {backend} {ref_us:.1f} us "
          f"({flops / ref_us / 1e6:.0f} TFLOP/s)")  # fmt: skip
    for r in rows:
        print(f"  {r['cfg']:<22} {r['us']:9.1f} us  {ref_us / r['us']:.3f}x  "
              f"{flops / r['us'] / 1e6:4.0f} TFLOP/s  err {r['err']:.2g}")  # fmt: skip
    sys.stdout.flush()
    return {"dtype": dtype, "d": d, "causal": causal, "N": n, "Z": z, "backend": backend,
            "ref_us": ref_us, "rows": rows}  # fmt: skip


# -- what both probe loops share with attn_fwd's: one key block's scores ----------------------


@triton.jit
def _block_scores(q, k_desc, row0, start_n, offs_m, m_i, qk_scale,
                  BLOCK_N: tl.constexpr, MASKED: tl.constexpr):  # fmt: skip
    """The block's scores and the rows' new running maxima (log2 units), as attn_fwd's loop
    makes them: a masked block's scores come back scaled (hidden keys at -1e6), an unmasked
    one's unscaled, its scale folded into ``_shifted``'s multiply-add."""
    k = k_desc.load([row0 + start_n, 0])
    s = tl.dot(q, k.T)
    if MASKED:
        visible = offs_m[:, None] >= (start_n + tl.arange(0, BLOCK_N))[None, :]
        s = tl.where(visible, s * qk_scale, -1.0e6)
        m_new = tl.maximum(m_i, tl.max(s, 1))
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
    return s, m_new


@triton.jit
def _shifted(s, m, qk_scale, MASKED: tl.constexpr):
    """``_block_scores``'s scores, scaled, less each row's maximum ``m``: exp2's argument."""
    return s - m[:, None] if MASKED else s * qk_scale - m[:, None]


# -- the same forward with lazy rescaling ------------------------------------------------------
# attn_fwd rescales the fp32 accumulator by exp2(m_old - m_new) at every key block: at head
# dim 128 and 64-key blocks, two multiplies per score. Here a block rescales only when some
# row's running maximum grew by more than TAU (in log2 units); until then p = exp2(s - m) with
# a stale m stays below 2**TAU, which fp16, bf16 and the fp32 sums hold exactly as well.


@triton.jit
def _attend_lazy(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, qk_scale,
                 BLOCK_N: tl.constexpr, MASKED: tl.constexpr, TAU: tl.constexpr):  # fmt: skip
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        s, m_new = _block_scores(q, k_desc, row0, start_n, offs_m, m_i, qk_scale, BLOCK_N,
                                 MASKED)  # fmt: skip
        if tl.max(m_new - m_i, 0) > TAU:
            alpha = tl.math.exp2(m_i - m_new)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha
            m_i = m_new
        p = tl.math.exp2(_shifted(s, m_i, qk_scale, MASKED))
        l_i += tl.sum(p, 1)
        v = v_desc.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_i


# -- the same forward with packed half-precision exponentials -----------------------------------
# The SFU's exp2 is the softmax's slowest unit (16 a clock per SM on sm_90); its packed f16x2
# and bf16x2 forms give two results per operation, and the MMA takes P in 16 bits anyway.
# The row sums still add in fp32.


@triton.jit
def _exp2_x2(x, like, ASM: tl.constexpr):
    """exp2 of fp32 ``x`` in ``like``'s 16-bit type, two values per instruction (ASM)."""
    return tl.inline_asm_elementwise(ASM, "=r,r", [x.to(like.dtype)], dtype=like.dtype,
                                     is_pure=True, pack=2)  # fmt: skip


@triton.jit
def _attend_x2(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, qk_scale,
               BLOCK_N: tl.constexpr, MASKED: tl.constexpr, ASM: tl.constexpr):  # fmt: skip
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        s, m_new = _block_scores(q, k_desc, row0, start_n, offs_m, m_i, qk_scale, BLOCK_N,
                                 MASKED)  # fmt: skip
        p = _exp2_x2(_shifted(s, m_new, qk_scale, MASKED), q, ASM)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([row0 + start_n, 0])
        acc = tl.dot(p, v, acc)
        m_i = m_new
    return acc, l_i, m_i


# -- both variants' forward: attn_fwd's, with FORM ("lazy" or "x2") choosing the key loop ---


@triton.jit
def _attend_form(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, qk_scale,
                 BLOCK_N: tl.constexpr, MASKED: tl.constexpr, FORM: tl.constexpr,
                 TAU: tl.constexpr, ASM: tl.constexpr):  # fmt: skip
    if FORM == "lazy":
        return _attend_lazy(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, qk_scale,
                            BLOCK_N, MASKED, TAU)  # fmt: skip
    return _attend_x2(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, qk_scale,
                      BLOCK_N, MASKED, ASM)  # fmt: skip


@triton.jit
def attn_fwd_variant(q_desc, k_desc, v_desc, o_desc, sm_scale, Z, H, N_CTX,
                     HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     CAUSAL: tl.constexpr, FORM: tl.constexpr, TAU: tl.constexpr = 8.0,
                     ASM: tl.constexpr = ""):  # fmt: skip
    pid_m = tl.program_id(0)
    start_m = (tl.cdiv(N_CTX, BLOCK_M) - 1 - pid_m) if CAUSAL else pid_m
    row0 = tl.program_id(1) * N_CTX
    q_row = row0 + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    q = q_desc.load([q_row, 0])
    if not CAUSAL:
        acc, l_i, m_i = _attend_form(acc, l_i, m_i, q, k_desc, v_desc, row0, 0, N_CTX, offs_m,
                                     qk_scale, BLOCK_N, False, FORM, TAU, ASM)  # fmt: skip
    else:
        diag = start_m * BLOCK_M
        acc, l_i, m_i = _attend_form(acc, l_i, m_i, q, k_desc, v_desc, row0, 0, diag, offs_m,
                                     qk_scale, BLOCK_N, False, FORM, TAU, ASM)  # fmt: skip
        end = diag + BLOCK_M
        acc, l_i, m_i = _attend_form(acc, l_i, m_i, q, k_desc, v_desc, row0, diag, end, offs_m,
                                     qk_scale, BLOCK_N, True, FORM, TAU, ASM)  # fmt: skip
    acc = acc / l_i[:, None]
    o_desc.store([q_row, 0], acc.to(o_desc.dtype))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--dims", default="128,64")
    ap.add_argument("--dtypes", default="fp16")
    ap.add_argument("--x2", action="store_true", help="run 3's configs (CONFIGS_X2)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    configs = CONFIGS_X2 if args.x2 else CONFIGS
    results = [probe(d, causal, n, args.rounds, dtype, configs)
               for dtype in args.dtypes.split(",")
               for d in (int(x) for x in args.dims.split(","))
               for causal in (False, True)
               for n in (int(x) for x in args.lengths.split(","))]  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
