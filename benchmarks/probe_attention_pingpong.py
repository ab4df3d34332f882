"""Probe: does FlashAttention-3's ping-pong schedule (the two computing warp groups take
turns to issue their products, so one's softmax runs while the other's products hold the
tensor cores) take the persistent Gluon attention past cuDNN at head dim 64 on the H200
(issue 21: d = 64 non-causal from 4096 tokens reads 0.97-1.04x)?

``attn_fwd_pp`` is recipes/hopper/attention_gluon_persistent.py's ``attn_fwd_ws2p`` with
one change in each key block of the loop: a warp group waits for its turn (an mbarrier the
other arrives on) before it issues the block's QK and PV products, and hands the turn over
right after issuing them. The first warp group's first wait passes at once (the parity of
a fresh barrier's previous phase). Everything else (loads, units, softmax) is the recipe's.

Times both through Triton's JIT, interleaved, at the bundle's pick, beside PyTorch's
fastest SDPA backend, Z * N = 16384 and 32 heads (benchmarks/hopper_bench.py's shapes);
each output is checked against SDPA's:

    python benchmarks/probe_attention_pingpong.py [--lengths 1024,4096,16384] [--dims 64]
        [--dtypes fp16,bf16] [--causal 0] [--json out.json]

"cuDNN / x" above 1 means x is faster. Not a benchmark of the bundle.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.probe_attention_regs import probe
from benchmarks.probe_gluon_attention import persistent
from benchmarks.probe_splitk import HOPPER

sys.path.insert(0, str(HOPPER))  # the recipe's kernel files import each other by name

from attention_gluon import _LOG2E, _buffers, _softmax
from attention_gluon_persistent import _key_blocks, _produce_tiles, _unit, attn_fwd_ws2p
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _attend_tile_pp(bufs, q_free, turns, t, second, i, c, n_blocks, diag_block, start_m,
                    qk_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    # attn_fwd_ws2p's _attend_tile; in each key block of the loop the products are issued
    # in this warp group's turn (turns.index(second)), then the turn goes to the other.
    q_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    dtype: gl.constexpr = q_smem.dtype
    warps: gl.constexpr = gl.num_warps()
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[warps, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    offs_m = start_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_s)
    zero_s = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    mine = turns.index(second)
    other = turns.index(1 - second)

    mbarrier.wait(q_bar, i & 1)
    mbarrier.wait(k_ready.index(c % STAGES), (c // STAGES) & 1)
    s = warpgroup_mma(q_smem, k_smem.index(c % STAGES).permute((1, 0)), zero_s, use_acc=False,
                      is_async=True)  # fmt: skip
    s = warpgroup_mma_wait(0, deps=[s])
    mbarrier.arrive(k_free.index(c % STAGES))
    mbarrier.arrive(q_free, pred=n_blocks == 1)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, rows_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, rows_s)
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, 0, diag_block, offs_m, qk_scale, BLOCK_N,
                                  CAUSAL)  # fmt: skip
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, o_layout)
    for j in range(1, n_blocks):
        slot = (c + j) % STAGES
        prev = (c + j - 1) % STAGES
        mbarrier.wait(k_ready.index(slot), ((c + j) // STAGES) & 1)
        mbarrier.wait(v_ready.index(prev), ((c + j - 1) // STAGES) & 1)
        p_op = gl.convert_layout(p.to(dtype), p_layout)
        mbarrier.wait(mine, (t + 1 + second) & 1)  # the first group's first wait passes
        s_tok = warpgroup_mma(q_smem, k_smem.index(slot).permute((1, 0)), zero_s,
                              use_acc=False, is_async=True)  # fmt: skip
        o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
        mbarrier.arrive(other)
        t += 1
        s, p_op = warpgroup_mma_wait(1, deps=[s_tok, p_op])
        mbarrier.arrive(k_free.index(slot))
        mbarrier.arrive(q_free, pred=j == n_blocks - 1)
        p, alpha, m_i, l_i = _softmax(s, m_i, l_i, j, diag_block, offs_m, qk_scale, BLOCK_N,
                                      CAUSAL)  # fmt: skip
        acc, p_op = warpgroup_mma_wait(0, deps=[o_tok, p_op])
        mbarrier.arrive(v_free.index(prev))
        acc = acc * gl.expand_dims(gl.convert_layout(alpha, rows_o), 1)
    last = (c + n_blocks - 1) % STAGES
    mbarrier.wait(v_ready.index(last), ((c + n_blocks - 1) // STAGES) & 1)
    p_op = gl.convert_layout(p.to(dtype), p_layout)
    o_tok = warpgroup_mma(p_op, v_smem.index(last), acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=[o_tok])
    mbarrier.arrive(v_free.index(last))
    return acc, gl.convert_layout(l_i, rows_o), t


@gluon.jit
def _consume_tiles_pp(o_desc, o_smem, second, bufs, q_free, turns, N_CTX, n_m, units,
                      qk_scale, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr,
                      BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                      CAUSAL: gl.constexpr):  # fmt: skip
    half: gl.constexpr = BLOCK_M // 2
    c = 0
    i = 0
    t = 0  # turns taken so far
    for u in range(gl.program_id(0), units, gl.num_programs(0)):
        row0, first, step, count = _unit(u, n_m, N_CTX, CAUSAL)
        for k in range(count):
            start_m = first - k * step
            n_blocks = _key_blocks(start_m, N_CTX, BLOCK_M, BLOCK_N, CAUSAL)
            diag = start_m * (BLOCK_M // BLOCK_N)
            acc, l_i, t = _attend_tile_pp(bufs, q_free, turns, t, second, i, c, n_blocks, diag,
                                          2 * start_m + second, qk_scale, HEAD_DIM, half,
                                          BLOCK_N, STAGES, CAUSAL)  # fmt: skip
            tma.store_wait(0)
            o_smem.store((acc / gl.expand_dims(l_i, 1)).to(o_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(o_desc,
                                            [row0 + start_m * BLOCK_M + second * half, 0],
                                            o_smem)  # fmt: skip
            c += n_blocks
            i += 1
    tma.store_wait(0)


@gluon.jit
def attn_fwd_pp(q_desc, k_desc, v_desc, o_desc, sm_scale, Z, H, N_CTX,
                HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                STAGES: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    n_m = gl.cdiv(N_CTX, BLOCK_M)
    units = (n_m + 1) // 2 * Z * H if CAUSAL else n_m * Z * H
    qk_scale = sm_scale * _LOG2E
    bufs = _buffers(q_desc, k_desc, v_desc, STAGES, 2)
    _, k_smem, v_smem, q_bar, k_ready, v_ready, k_free, v_free = bufs
    q1_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    o_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    o1_smem = gl.allocate_shared_memory(o_desc.dtype, o_desc.block_type.shape, o_desc.layout)
    q_free = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(q_free, count=2)
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(turns.index(0), count=1)
    mbarrier.init(turns.index(1), count=1)
    fence_async_shared()
    gl.warp_specialize(
        [(_consume_tiles_pp, (o_desc, o_smem, 0, bufs, q_free, turns, N_CTX, n_m, units,
                              qk_scale, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, CAUSAL)),
         (_consume_tiles_pp, (o_desc, o1_smem, 1,
                              (q1_smem, k_smem, v_smem, q_bar, k_ready, v_ready, k_free,
                               v_free),
                              q_free, turns, N_CTX, n_m, units, qk_scale, HEAD_DIM, BLOCK_M,
                              BLOCK_N, STAGES, CAUSAL)),
         (_produce_tiles, (q_desc, k_desc, v_desc, bufs, q1_smem, q_free, N_CTX, n_m, units,
                           BLOCK_M, BLOCK_N, STAGES, CAUSAL))],
        [gl.num_warps(), 1], [240, 24])  # fmt: skip


def runner(cfg: tuple, q, k, v, o, causal: bool):
    kind, bm, bn, stages = cfg
    kernel = attn_fwd_pp if kind == "pp" else attn_fwd_ws2p
    return persistent(kernel, q, k, v, o, causal, bm, bn, stages, bm // 2, CAUSAL=causal)


def label(cfg: tuple) -> str:
    kind, bm, bn, stages = cfg
    return f"{kind}-{bm}x{bn}-s{stages}"


# (head dim, causal) -> the bundle's picks (BLOCK_M, BLOCK_N, STAGES) at 1024-16384, and
# the ping-pong kernel at those and at a deeper ring
PICKS = {(64, False): [(128, 128, 4)], (64, True): [(128, 128, 3)],
         (128, False): [(128, 128, 2)], (128, True): [(128, 128, 2)]}  # fmt: skip
CONFIGS = {key: [(kind, *pick) for pick in picks for kind in ("base", "pp")]
           for key, picks in PICKS.items()}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="1024,4096,16384")
    ap.add_argument("--dims", default="64")
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--causal", default="0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    results = [probe(d, causal, n, args.rounds, dtype, CONFIGS, runner, label)
               for dtype in args.dtypes.split(",")
               for d in (int(x) for x in args.dims.split(","))
               for causal in (bool(int(c)) for c in args.causal.split(","))
               for n in (int(x) for x in args.lengths.split(","))]  # fmt: skip
    print("\nsummary: cuDNN (or the best SDPA) / x")
    print(f"{'dtype':<5} {'d':>4} {'causal':<6} {'N':>6} {'base':>7} {'pp':>7}")
    for r in results:
        by = {row["cfg"].split("-")[0]: row for row in r["rows"]}
        cells = [
            f"{r['ref_us'] / by[k]['us']:7.3f}" if k in by else "      -" for k in ("base", "pp")
        ]
        print(f"{r['dtype']:<5} {r['d']:>4} {r['causal']!s:<6} {r['N']:>6} " + " ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
