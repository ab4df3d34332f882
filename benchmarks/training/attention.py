"""Attention forward in the FlashAttention-2 style, for [batch x heads, seq, head_dim]
tensors (last dimension contiguous): one program per BLOCK_M queries of one head, an
online softmax over BLOCK_N-wide tiles of keys and values, fp32 accumulation, one
division at the end. CAUSAL stops the sweep at the diagonal and masks the last tiles.
Plain tl.dot and pointer loads: no Hopper-only features.
"""

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def attention_fwd(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    sm_scale,
    BH,
    N_CTX,
    stride_qb,
    stride_qn,
    stride_kb,
    stride_kn,
    stride_vb,
    stride_vn,
    stride_ob,
    stride_on,
    HEAD_DIM: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0) * BLOCK_M
    bh = tl.program_id(1).to(tl.int64)
    if bh >= BH:
        return
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    m_ok = offs_m < N_CTX
    q = tl.load(
        q_ptr + bh * stride_qb + offs_m[:, None] * stride_qn + offs_d[None, :],
        mask=m_ok[:, None],
        other=0.0,
    )
    qk_scale = sm_scale * LOG2E
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    end = tl.minimum(start_m + BLOCK_M, N_CTX) if CAUSAL else N_CTX
    k_base = k_ptr + bh * stride_kb
    v_base = v_ptr + bh * stride_vb
    for start_n in range(0, end, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        n_ok = offs_n < N_CTX
        kt = tl.load(
            k_base + offs_n[None, :] * stride_kn + offs_d[:, None], mask=n_ok[None, :], other=0.0
        )
        s = tl.dot(q, kt) * qk_scale
        keep = n_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= offs_n[None, :])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # rows with no key yet (padding rows past N_CTX) stay at -inf: keep them finite
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(
            v_base + offs_n[:, None] * stride_vn + offs_d[None, :], mask=n_ok[:, None], other=0.0
        )
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(
        o_ptr + bh * stride_ob + offs_m[:, None] * stride_on + offs_d[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=m_ok[:, None],
    )
