"""Attention forward on Hopper (FlashAttention-2 style) with TMA tensor descriptors.

Q, K, V and O are [Z, H, N_CTX, HEAD_DIM] contiguous, fp16 or bf16, seen by the host as 2-D
tensors [Z * H * N_CTX, HEAD_DIM] through ``TensorDescriptor``s with blocks
[BLOCK_M, HEAD_DIM] (Q, O) and [BLOCK_N, HEAD_DIM] (K, V). The grid is
``(cdiv(N_CTX, BLOCK_M), Z * H)``: one program per block of BLOCK_M queries of one head.

Each program keeps its Q block in registers and walks the keys in blocks of BLOCK_N with an
online softmax in fp32 (base-2 exponentials, the log2(e) factor folded into the scale), an
fp32 accumulator and the normalisation deferred to the end. With CAUSAL the walk has two
stages: the blocks wholly below the diagonal, which need no mask, then the BLOCK_M keys on
the diagonal, masked; causal programs take their query blocks last-first so that the
longest ones start first and the short ones fill the tail of the launch.

Supported: N_CTX a multiple of BLOCK_M and of BLOCK_N (any multiple of 128 for every
config here): the flat 2-D view has no edge between heads, so a partial block would read
the next head's keys and write over its first rows. With CAUSAL, BLOCK_M must be a multiple
of BLOCK_N. Row coordinates are 32-bit, as TMA's are: Z * H * N_CTX < 2**31.

WARP_SPECIALIZE: as in tma_matmul.py, it takes effect at num_warps=4 only (12 warps run)
and, because O is a host descriptor, for BLOCK_M <= 64 only. With CAUSAL it walks all the
keys up to the diagonal in one masked loop, the form the pass accepts.
"""

import triton
import triton.language as tl

# log2(e): exp(x) == exp2(x * log2(e)).
_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, lo, hi, offs_m, qk_scale,
            BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
            WARP_SPECIALIZE: tl.constexpr):  # fmt: skip
    # Keys [lo, hi) of the head whose rows start at row0 in the flat view.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = k_desc.load([row0 + start_n, 0])
        s = tl.dot(q, k.T)
        if MASKED:
            # A large finite negative (not -inf) keeps m_i - m_new finite even for a row
            # whose block is fully masked.
            visible = offs_m[:, None] >= (start_n + offs_n)[None, :]
            s = tl.where(visible, s * qk_scale, -1.0e6)
            m_new = tl.maximum(m_i, tl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = tl.math.exp2(s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = v_desc.load([row0 + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd(
    q_desc,
    k_desc,
    v_desc,
    o_desc,
    sm_scale,
    Z,
    H,
    N_CTX,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    tl.static_assert(not CAUSAL or BLOCK_M % BLOCK_N == 0, "causal needs BLOCK_M % BLOCK_N == 0")
    # Triton 3.6 splits a 128-row tile between two consumer warp groups when it
    # warp-specialises on sm_90, and the O store then no longer matches the host
    # descriptor's block: the option is honoured for BLOCK_M <= 64 only.
    USE_WS: tl.constexpr = WARP_SPECIALIZE and BLOCK_M <= 64
    pid_m = tl.program_id(0)
    start_m = (tl.cdiv(N_CTX, BLOCK_M) - 1 - pid_m) if CAUSAL else pid_m
    row0 = tl.program_id(1) * N_CTX
    q_row = row0 + start_m * BLOCK_M
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * _LOG2E
    q = q_desc.load([q_row, 0])

    if not CAUSAL:
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, 0, N_CTX, offs_m,
                                qk_scale, BLOCK_N, False, USE_WS)  # fmt: skip
    elif USE_WS:
        # The warp-specialising pass fails on the two-loop form below; one loop that
        # masks every block is what it accepts.
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, 0,
                                (start_m + 1) * BLOCK_M, offs_m, qk_scale, BLOCK_N, True,
                                USE_WS)  # fmt: skip
    else:
        diag = start_m * BLOCK_M
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, 0, diag, offs_m,
                                qk_scale, BLOCK_N, False, False)  # fmt: skip
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_desc, v_desc, row0, diag, diag + BLOCK_M,
                                offs_m, qk_scale, BLOCK_N, True, False)  # fmt: skip

    acc = acc / l_i[:, None]
    o_desc.store([q_row, 0], acc.to(o_desc.dtype))
